package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// cookieName is the session cookie's name.
const cookieName = "ferry_session"

// sessionLife is how long a session lasts at most (the key's own expiry
// ends it sooner).
const sessionLife = 12 * time.Hour

// session is what the cookie holds: whose session it is, until when, and
// the nonce its CSRF token is made from.
type session struct {
	KeyID string
	Until time.Time
	Nonce string
}

var errNoSession = errors.New("console: no valid session")

// seal makes the cookie value of s: its fields, then their MAC.
func (c *Console) seal(s session) string {
	payload := s.KeyID + "|" + strconv.FormatInt(s.Until.Unix(), 10) + "|" + s.Nonce
	enc := base64.RawURLEncoding.EncodeToString([]byte(payload))
	return enc + "." + base64.RawURLEncoding.EncodeToString(c.mac("session", enc))
}

// open checks a cookie value's MAC and end and returns its session.
func (c *Console) open(v string, now time.Time) (session, error) {
	enc, sig, ok := strings.Cut(v, ".")
	if !ok || len(v) > 512 {
		return session{}, errNoSession
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, c.mac("session", enc)) {
		return session{}, errNoSession
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return session{}, errNoSession
	}
	parts := strings.Split(string(raw), "|")
	if len(parts) != 3 {
		return session{}, errNoSession
	}
	unix, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || !now.Before(time.Unix(unix, 0)) {
		return session{}, errNoSession
	}
	return session{KeyID: parts[0], Until: time.Unix(unix, 0), Nonce: parts[2]}, nil
}

// mac is the HMAC-SHA256 of what, for purpose, under the console's secret.
func (c *Console) mac(purpose, what string) []byte {
	m := hmac.New(sha256.New, c.secret)
	m.Write([]byte(purpose + "\x00" + what))
	return m.Sum(nil)
}

// csrfToken is the CSRF token of the session s: forms carry it, and a
// change is made only when it matches.
func (c *Console) csrfToken(s session) string {
	return base64.RawURLEncoding.EncodeToString(c.mac("csrf", s.Nonce))
}

// csrfValid reports whether token is s's CSRF token.
func (c *Console) csrfValid(s session, token string) bool {
	want := c.csrfToken(s)
	return len(token) == len(want) && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}

// newNonce is a fresh random nonce.
func newNonce() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sessionCookie is the cookie that holds value (empty and already expired
// to sign out). It is Secure when the request came over TLS, or when the
// console's public URL (FERRY_PUBLIC_URL) is https: behind a proxy that
// ends TLS, Ferry sees plain HTTP but the browser speaks HTTPS, and the
// cookie must never travel over plain HTTP. (A forwarded header is not
// trusted for it: any client could send one.)
func (c *Console) sessionCookie(r *http.Request, value string, until time.Time) *http.Cookie {
	ck := &http.Cookie{
		Name: cookieName, Value: value, Path: "/ui", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || c.public.Scheme == "https",
	}
	if value == "" {
		ck.MaxAge = -1
	} else {
		ck.Expires = until
	}
	return ck
}

// DeriveSecret makes the console's session secret from the server's
// configured secrets (FERRY_ADMIN_KEY, and FERRY_SECRET_KEY when set):
// every instance configured alike derives the same one, so a session
// made on one is honoured by the others behind a load balancer, and
// changing either secret ends every session.
func DeriveSecret(adminKey, secretKey string) []byte {
	m := hmac.New(sha256.New, []byte(adminKey))
	m.Write([]byte("ferry console session v1\x00" + secretKey))
	return m.Sum(nil)
}
