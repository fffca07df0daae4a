package handlers

import (
	"regexp"

	"github.com/labstack/echo/v4"
)

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidName reports whether s is a valid name of a queue, topic,
// subscription or group: the rule every face applies.
func ValidName(s string) bool { return nameRe.MatchString(s) }

// name returns the path parameter p after checking it is a valid name.
func name(c echo.Context, p string) (string, error) {
	n := c.Param(p)
	if !nameRe.MatchString(n) {
		return "", invalid(p, "must match %s", nameRe)
	}
	return n, nil
}
