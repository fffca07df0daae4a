package handlers

import (
	"context"

	"github.com/labstack/echo/v4"
)

// keyRecheck is what the request's long poll (a receive, an event read, a
// group poll) calls before each claim or read after its first, that is
// after each wait: the request's key is authenticated again, so that a
// key revoked or expired while the poll waits gets the 401 a new request
// would (code unauthorized) and nothing is claimed or read for it. It
// reads the key cache, as every request does: no database read while the
// key is held there, which it is until a delete of it is heard (a deleted
// key is read once, and found gone).
func (h *handler) keyRecheck(c echo.Context) func(context.Context) error {
	return func(context.Context) error {
		_, err := h.authenticate(c)
		return err
	}
}
