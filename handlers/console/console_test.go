package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

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

// TestConsoleEscapesEverything proves that names, bodies, attributes and
// errors holding markup are shown as text: no <script> of theirs reaches
// a page.
func TestConsoleEscapesEverything(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	rest(t, env, "PUT", "/v1/queues/xss", nil, http.StatusCreated)
	deadLetterAll(t, env, "xss", `<script>alert("err")</script>`, map[string]any{"html": `<script>alert("dl")</script>`})
	rest(t, env, "POST", "/v1/queues/xss/messages", map[string]any{"messages": []any{
		map[string]any{"body": `<script>alert("body")</script>`, "attributes": map[string]any{"a": `<img src=x onerror=alert(1)>`}},
	}}, http.StatusCreated)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	p := u.get("/ui/queues/xss")
	require.Equal(t, http.StatusOK, p.Status)
	require.NotContains(t, p.Body, "<script")
	require.NotContains(t, p.Body, "<img")
	require.Contains(t, p.Body, `&lt;script&gt;alert(\&#34;body\&#34;)&lt;/script&gt;`, "the body shows as written, as text")
	require.Contains(t, p.Body, `&lt;script&gt;alert(&#34;err&#34;)&lt;/script&gt;`)

	// A search or a name with markup is text too, and an unknown one a
	// readable 404 page.
	p = u.get("/ui/?q=" + url.QueryEscape(`"><script>x</script>`))
	require.Equal(t, http.StatusOK, p.Status)
	require.NotContains(t, p.Body, "<script")
	p = u.get("/ui/queues/" + url.PathEscape(`<script>x</script>`))
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.NotContains(t, p.Body, "<script")
	require.Contains(t, p.Header.Get("Content-Type"), "text/html")
	p = u.get("/ui/queues/nope")
	require.Equal(t, http.StatusNotFound, p.Status)
	require.Contains(t, p.Body, `id="error"`)
	require.Equal(t, http.StatusNotFound, u.get("/ui/no/such/page").Status)
}

// TestConsoleActionsAreREST proves that a console action is its REST
// route's: a redrive puts the dead letters back and is in the audit log
// under the signed-in key, after a confirmation; a form without the CSRF
// token, or from another origin, changes nothing; a key that may only read
// sees no control and a forged form is refused by REST's check.
func TestConsoleActionsAreREST(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	rest(t, env, "PUT", "/v1/queues/orders", nil, http.StatusCreated)
	deadLetterAll(t, env, "orders", "boom", 1, 2, 3)
	id, secret := newKey(t, env, "queue:orders", "receive", "manage")
	u := newUI(t, env)
	u.signIn(secret)

	page := u.get("/ui/queues/orders")
	require.Contains(t, page.Body, "boom")
	require.Contains(t, page.Body, "Redrive all")
	token := u.csrf("/ui/queues/orders")

	// No token, a wrong one, another origin: refused, nothing changed.
	for _, form := range []url.Values{{"confirm": {"yes"}}, {"confirm": {"yes"}, "csrf": {"x" + token}}} {
		p := u.post("/ui/queues/orders/redrive", form)
		require.Equal(t, http.StatusForbidden, p.Status)
		require.Contains(t, p.Body, "CSRF")
	}
	req, _ := http.NewRequest("POST", env.URL+"/ui/queues/orders/redrive", strings.NewReader(url.Values{"confirm": {"yes"}, "csrf": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.invalid")
	require.Equal(t, http.StatusForbidden, u.do(req).Status)
	require.Equal(t, "3", str(stats(t, env, "orders")["dead_letters"]))

	// Without confirm: a confirmation page, nothing done yet.
	p := u.post("/ui/queues/orders/redrive", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, `name="confirm" value="yes"`)
	require.Equal(t, "3", str(stats(t, env, "orders")["dead_letters"]))
	p = u.post("/ui/queues/orders/redrive", url.Values{"csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Contains(t, p.Body, "3 redriven")
	require.Equal(t, "0", str(stats(t, env, "orders")["dead_letters"]))
	require.Equal(t, "3", str(stats(t, env, "orders")["available"]))
	audit := rest(t, env, "GET", "/v1/audit?limit=5", nil, http.StatusOK)["entries"].([]any)
	last := audit[0].(map[string]any)
	require.Equal(t, "dead_letters.redrive", last["action"])
	require.Equal(t, id, last["key_id"])
	require.Equal(t, "queue:orders", last["resource"])

	// A read-only key sees no control, and REST refuses its forged form.
	_, ro := newKey(t, env, "queue:orders", "read", "receive")
	r := newUI(t, env)
	r.signIn(ro)
	page = r.get("/ui/queues/orders")
	require.Equal(t, http.StatusOK, page.Status)
	for _, control := range []string{"Redrive", "Purge", "Rotate", "Enable"} {
		require.NotContains(t, page.Body, control)
	}
	p = r.post("/ui/queues/orders/purge", url.Values{"csrf": {r.csrf("/ui/")}, "confirm": {"yes"}})
	require.Equal(t, http.StatusForbidden, p.Status)
	require.Contains(t, p.Body, "queue:orders manage")
	require.Equal(t, "3", str(stats(t, env, "orders")["available"]))
	require.Equal(t, http.StatusForbidden, r.get("/ui/keys").Status)
	require.NotContains(t, r.get("/ui/").Body, "/ui/keys")
}

// TestConsoleRevokedKeySignedOut proves that revoking a key ends its
// console sessions within a second, like its REST requests.
func TestConsoleRevokedKeySignedOut(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	id, secret := newKey(t, env, "queue:*", "read")
	u := newUI(t, env)
	u.signIn(secret)
	require.Equal(t, http.StatusOK, u.get("/ui/").Status)
	rest(t, env, "DELETE", "/v1/keys/"+id, nil, http.StatusNoContent)
	start := time.Now()
	ferrytest.WaitFor(t, 5*time.Second, "the session ends", func() bool { return u.get("/ui/").Status == http.StatusSeeOther })
	require.Less(t, time.Since(start), 2*time.Second)
	require.Equal(t, "/ui/login", u.get("/ui/").Header.Get("Location"))
}

// TestConsoleOverviewSearch proves the overview pages and searches by
// name, lists only what the key may read, and puts dead letters first.
func TestConsoleOverviewSearch(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	for i := range 120 {
		rest(t, env, "PUT", "/v1/queues/"+name(i), nil, http.StatusCreated)
	}
	rest(t, env, "PUT", "/v1/queues/other-1", nil, http.StatusCreated)
	deadLetterAll(t, env, name(77), "bad", 1)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	p := u.get("/ui/")
	require.Equal(t, http.StatusOK, p.Status)
	trouble := p.Body[strings.Index(p.Body, `id="trouble"`):strings.Index(p.Body, `id="queues"`)]
	require.Contains(t, trouble, name(77))
	require.Equal(t, 50, strings.Count(p.Body[strings.Index(p.Body, `id="queues"`):], `<a href="/ui/queues/`))
	require.Contains(t, p.Body, "More queues")
	p = u.get("/ui/?q=other")
	require.Contains(t, p.Body, "other-1")
	require.NotContains(t, p.Body, name(1)+"<")

	rest(t, env, "PUT", "/v1/topics/tp", nil, http.StatusCreated)
	for _, sub := range []string{"s1", "hidden"} {
		rest(t, env, "PUT", "/v1/topics/tp/subscriptions/"+sub, nil, http.StatusCreated)
	}
	rest(t, env, "POST", "/v1/topics/tp/events", map[string]any{"events": []any{map[string]any{"type": "x"}}}, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/tp/groups/g1/poll", map[string]any{"consumer": "c"}, http.StatusOK)
	p = u.get("/ui/?q=tp")
	topics := p.Body[strings.Index(p.Body, `id="topics"`):]
	for _, want := range []string{"/ui/topics/tp/subscriptions/s1", "/ui/topics/tp/subscriptions/hidden", "/ui/topics/tp/groups/g1"} {
		require.Contains(t, topics, want)
	}

	m := rest(t, env, "POST", "/v1/keys", map[string]any{"name": "scoped", "permissions": []any{
		map[string]any{"resource": "queue:q-00*", "actions": []string{"read"}},
		map[string]any{"resource": "topic:tp", "actions": []string{"read"}},
		map[string]any{"resource": "subscription:tp/s1", "actions": []string{"read"}},
	}}, http.StatusCreated)
	s := newUI(t, env)
	s.signIn(m["key"].(string))
	p = s.get("/ui/")
	require.Equal(t, 10, strings.Count(p.Body, `<a href="/ui/queues/`), "q-000 to q-009 only")
	require.NotContains(t, p.Body, name(77))
	require.Contains(t, p.Body, "/ui/topics/tp/subscriptions/s1")
	require.NotContains(t, p.Body, "/subscriptions/hidden")
	require.NotContains(t, p.Body, "/groups/g1")
}

func name(i int) string {
	return "q-" + string(rune('0'+i/100)) + string(rune('0'+i/10%10)) + string(rune('0'+i%10))
}

func str(v any) string { return fmt.Sprint(v) }

// TestConsoleCharts proves the charts: traffic through REST is sampled
// into the history, and the queue and group pages draw it as SVG.
func TestConsoleCharts(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.SampleEvery = 50 * time.Millisecond })
	rest(t, env, "PUT", "/v1/queues/busy", nil, http.StatusCreated)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	require.Contains(t, u.get("/ui/queues/busy").Body, "no traffic in the last hour")

	deadLetterAll(t, env, "busy", "bad", 1, 2)
	rest(t, env, "PUT", "/v1/topics/tp", nil, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/tp/groups/g/poll", map[string]any{"consumer": "c1"}, http.StatusOK)
	ferrytest.WaitFor(t, 10*time.Second, "the queue's chart", func() bool {
		p := u.get("/ui/queues/busy")
		return strings.Contains(p.Body, `id="charts"`) && !strings.Contains(p.Body, "no traffic") && strings.Contains(p.Body, `<polyline points="`)
	})
	p := u.get("/ui/queues/busy")
	require.Contains(t, p.Body, "dead letters")
	require.Contains(t, p.Body, "<svg")
	ferrytest.WaitFor(t, 10*time.Second, "the group's chart", func() bool {
		return !strings.Contains(u.get("/ui/topics/tp/groups/g").Body, "no traffic")
	})
}
