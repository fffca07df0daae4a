package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestConsoleSession proves sign-in and sign-out: a page needs a session,
// a wrong key is refused, the cookie is HttpOnly, SameSite=Strict, path
// /ui and does not hold the key, pages carry a strict CSP and refuse
// framing, and the key is in no page and no log line.
func TestConsoleSession(t *testing.T) {
	t.Parallel()
	var logs ferrytest.LogBuffer
	env := ferrytest.StartLogging(t, &logs)
	u := newUI(t, env)

	p := u.get("/ui/")
	require.Equal(t, http.StatusSeeOther, p.Status)
	require.Equal(t, "/ui/login", p.Header.Get("Location"))
	p = u.get("/ui/login")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Contains(t, p.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.NotContains(t, p.Header.Get("Content-Security-Policy"), "script-src")
	require.Equal(t, "DENY", p.Header.Get("X-Frame-Options"))

	p = u.post("/ui/login", url.Values{"key": {"not-a-key-at-all-0000"}})
	require.Equal(t, http.StatusUnauthorized, p.Status)
	require.Contains(t, p.Body, "not valid")
	p = u.post("/ui/login", url.Values{"key": {strings.Repeat("x", 100_000)}})
	require.Equal(t, http.StatusUnauthorized, p.Status)

	p = u.post("/ui/login", url.Values{"key": {ferrytest.AdminKey}})
	require.Equal(t, http.StatusSeeOther, p.Status)
	cookies := (&http.Response{Header: p.Header}).Cookies()
	require.Len(t, cookies, 1)
	ck := cookies[0]
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.Equal(t, "/ui", ck.Path)
	require.False(t, ck.Secure, "plain HTTP here; Secure under TLS")
	require.NotContains(t, ck.Value, ferrytest.AdminKey)

	for _, path := range []string{"/ui/", "/ui/keys", "/ui/audit"} {
		p = u.get(path)
		require.Equal(t, http.StatusOK, p.Status, path)
		require.NotContains(t, p.Body, ferrytest.AdminKey, path)
	}
	require.Contains(t, p.Body, "Audit log")

	// A forged cookie is no session.
	forged := newUI(t, env)
	req, _ := http.NewRequest("GET", env.URL+"/ui/", nil)
	req.AddCookie(&http.Cookie{Name: "ferry_session", Value: strings.Replace(ck.Value, "a", "b", 1) + "x"})
	require.Equal(t, http.StatusSeeOther, forged.do(req).Status)

	// Sign-out needs the CSRF token, and ends the session.
	require.Equal(t, http.StatusForbidden, u.post("/ui/logout", nil).Status)
	p = u.post("/ui/logout", url.Values{"csrf": {u.csrf("/ui/")}})
	require.Equal(t, http.StatusSeeOther, p.Status)
	require.Equal(t, http.StatusSeeOther, u.get("/ui/").Status)
	require.NotContains(t, logs.String(), ferrytest.AdminKey)
}

// TestConsoleSecureCookieBehindProxy proves the cookie behind a proxy that
// ends TLS: with FERRY_PUBLIC_URL https, the session cookie is Secure
// though Ferry itself is spoken to in plain HTTP (so a browser never
// sends it over plain HTTP), and so is the one that signs out; a form
// whose Origin is the public URL is the console's own, one from its
// plain-HTTP twin is not; an X-Forwarded-Proto header alone changes
// nothing (any client can send one).
func TestConsoleSecureCookieBehindProxy(t *testing.T) {
	t.Parallel()
	const public = "https://ferry.example.invalid"
	env := ferrytest.Start(t, func(c *server.Config) { c.PublicURL = public })
	u := newUI(t, env)
	login := func(origin string) page {
		req, _ := http.NewRequest("POST", env.URL+"/ui/login", strings.NewReader(url.Values{"key": {ferrytest.AdminKey}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		return u.do(req)
	}
	require.Equal(t, http.StatusForbidden, login("http://ferry.example.invalid").Status, "another origin")
	p := login(public)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	cookies := (&http.Response{Header: p.Header}).Cookies()
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].Secure, "Secure: the browser speaks HTTPS to the proxy")
	require.True(t, cookies[0].HttpOnly)

	// Signing out (a cookie sent by hand: a jar keeps Secure cookies off
	// plain HTTP, as a browser does) sets a Secure cookie too.
	get, _ := http.NewRequest("GET", env.URL+"/ui/", nil)
	get.AddCookie(cookies[0])
	home := newUI(t, env).do(get)
	require.Equal(t, http.StatusOK, home.Status)
	token := csrfRE.FindStringSubmatch(home.Body)[1]
	out, _ := http.NewRequest("POST", env.URL+"/ui/logout", strings.NewReader(url.Values{"csrf": {token}}.Encode()))
	out.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	out.Header.Set("Origin", public)
	out.AddCookie(cookies[0])
	p = newUI(t, env).do(out)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	gone := (&http.Response{Header: p.Header}).Cookies()
	require.Len(t, gone, 1)
	require.True(t, gone[0].Secure)
	require.Negative(t, gone[0].MaxAge)

	// Without the setting, a forwarded header does not make it Secure.
	plain := ferrytest.Start(t)
	req, _ := http.NewRequest("POST", plain.URL+"/ui/login", strings.NewReader(url.Values{"key": {ferrytest.AdminKey}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-Proto", "https")
	p = newUI(t, plain).do(req)
	require.Equal(t, http.StatusSeeOther, p.Status)
	require.False(t, (&http.Response{Header: p.Header}).Cookies()[0].Secure)
}
