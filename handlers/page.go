package handlers

import (
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// Lists page with ?limit=N&after=<cursor> and answer "next": the cursor of
// the following page, or null on the last one (API.md § Conventions).
const (
	defaultPageLimit = 100
	maxPageLimit     = 1000
)

// listPage is the page a list request asks for: at most limit items named
// after the name its cursor carries.
type listPage struct {
	kind  string // what is listed: a cursor names it, so another list refuses it
	limit int
	after string // "" for the first page
}

// pageOf reads a list request's limit and after. A cursor must be one that
// pageOf's next issued for this kind of list, byte for byte: anything else
// is a 400, never a guess.
func pageOf(c echo.Context, kind string) (listPage, error) {
	limit, err := limitOf(c)
	if err != nil {
		return listPage{}, err
	}
	p := listPage{kind: kind, limit: limit}
	s, ok := c.QueryParams()["after"]
	if !ok {
		return p, nil
	}
	if p.after, ok = parseCursor(kind, s[0]); !ok {
		return listPage{}, invalid("after", "is not a cursor issued by Ferry for this list")
	}
	return p, nil
}

// next is the cursor of the page after one whose last item is named last,
// or nil when no more follow.
func (p listPage) next(more bool, last string) *string {
	if !more {
		return nil
	}
	s := formatCursor(p.kind, last)
	return &s
}

// limitOf reads ?limit: 1 to maxPageLimit, default defaultPageLimit; out of
// range is a 400, never clamped.
func limitOf(c echo.Context) (int, error) {
	v, err := queryInt(c, "limit", defaultPageLimit, 1, maxPageLimit)
	return int(v), err
}

// formatCursor makes the cursor of a list of kind that continues after the
// given name: opaque to clients (base64url, unpadded).
func formatCursor(kind, name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + name))
}

// parseCursor returns the name of a cursor made by formatCursor for kind;
// ok is false for any other string. Decoding is strict and the cursor must
// re-encode to itself, so no second spelling of a cursor (padding, other
// trailing bits, line breaks) is accepted.
func parseCursor(kind, s string) (name string, ok bool) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || base64.RawURLEncoding.EncodeToString(b) != s {
		return "", false
	}
	name, ok = strings.CutPrefix(string(b), kind+":")
	return name, ok && nameRe.MatchString(name)
}

// reply answers a page of a list: its items, under the list's kind, and
// the cursor of the next page (see next).
func (p listPage) reply(c echo.Context, items any, more bool, last string) error {
	return reply(c, http.StatusOK, map[string]any{p.kind: items, "next": p.next(more, last)})
}
