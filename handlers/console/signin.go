package console

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
)

// maxKeyLength bounds what the sign-in form's key may be (keys are far
// shorter; a longer one is refused unread).
const maxKeyLength = 512

func (c *Console) loginPage(ec echo.Context) error {
	return c.render(ec, http.StatusOK, "login", nil, "Sign in", map[string]any{})
}

// login resolves the given key as REST resolves a Bearer secret and, if
// it works, starts a session for its id. The key itself is kept nowhere.
func (c *Console) login(ec echo.Context) error {
	if !c.sameOrigin(ec.Request()) {
		return c.fail(ec, http.StatusForbidden, "Sign in from the console's own page.")
	}
	secret := ec.FormValue("key")
	if secret == "" || len(secret) > maxKeyLength {
		return c.render(ec, http.StatusUnauthorized, "login", nil, "Sign in", map[string]any{"Error": "That API key is not valid."})
	}
	key, err := c.resolver.Resolve(ec.Request().Context(), trimmed(secret, maxKeyLength))
	now := time.Now()
	switch {
	case errors.Is(err, access.ErrInvalidKey) || (err == nil && key.Expired(now)):
		return c.render(ec, http.StatusUnauthorized, "login", nil, "Sign in", map[string]any{"Error": "That API key is not valid."})
	case err != nil:
		c.log.Error("console: sign-in lookup failed", "error", err)
		return c.fail(ec, http.StatusServiceUnavailable, "The database did not answer; try again.")
	}
	until := now.Add(sessionLife)
	if !key.ExpiresAt.IsZero() && key.ExpiresAt.Before(until) {
		until = key.ExpiresAt
	}
	ec.SetCookie(c.sessionCookie(ec.Request(), c.seal(session{KeyID: key.ID, Until: until, Nonce: newNonce()}), until))
	c.log.Info("console: signed in", "key_id", key.ID)
	return ec.Redirect(http.StatusSeeOther, "/ui/")
}

// logout ends the session (a form with the CSRF token: no other site can
// sign a user out).
func (c *Console) logout(ec echo.Context, v viewer) error {
	if !c.sameOrigin(ec.Request()) || !c.csrfValid(v.session, ec.FormValue("csrf")) {
		return c.failAs(ec, v, http.StatusForbidden, "This form is not valid (its CSRF token is missing or wrong).")
	}
	ec.SetCookie(c.sessionCookie(ec.Request(), "", time.Time{}))
	return ec.Redirect(http.StatusSeeOther, "/ui/login")
}
