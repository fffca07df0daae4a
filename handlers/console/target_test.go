package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

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

// TestConsolePush proves a push subscription's page: its status and
// recent attempts, enable, and a rotated secret shown once, on the
// answer of the rotation only.
func TestConsolePush(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.AllowPrivatePush = true })
	rest(t, env, "PUT", "/v1/topics/orders", nil, http.StatusCreated)
	rest(t, env, "PUT", "/v1/topics/orders/subscriptions/hook", map[string]any{
		"push": map[string]any{"url": "http://127.0.0.1:1/hook", "timeout_seconds": 1}, "retry_min_seconds": 1, "retry_max_seconds": 1,
	}, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/orders/events", map[string]any{"events": []any{map[string]any{"type": "order.created"}}}, http.StatusCreated)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	ferrytest.WaitFor(t, 20*time.Second, "a failed attempt shown", func() bool {
		return strings.Contains(u.get("/ui/topics/orders/subscriptions/hook").Body, "Recent attempts</h3><div")
	})
	p := u.get("/ui/topics/orders/subscriptions/hook")
	require.Contains(t, p.Body, "http://127.0.0.1:1/hook")
	token := csrfRE.FindStringSubmatch(p.Body)[1]

	p = u.post("/ui/topics/orders/subscriptions/hook/rotate-secret", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	m := regexp.MustCompile(`id="secret">(whsec_[^<]+)<`).FindStringSubmatch(p.Body)
	require.NotNil(t, m, p.Body)
	require.NotContains(t, u.get("/ui/topics/orders/subscriptions/hook").Body, m[1], "shown once")
	p = u.post("/ui/topics/orders/subscriptions/hook/enable", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	audit := rest(t, env, "GET", "/v1/audit?limit=2", nil, http.StatusOK)["entries"].([]any)
	require.Equal(t, "push.enable", audit[0].(map[string]any)["action"])
}

// TestConsoleSubscriptionPurge: a subscription's page offers a key with
// manage a purge of its messages, behind a confirmation; confirmed, it is
// REST's DELETE .../subscriptions/{sub}/messages (done, and in the audit
// log under the key); a key without manage sees no purge and its forged
// form is refused by REST's check.
func TestConsoleSubscriptionPurge(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	rest(t, env, "PUT", "/v1/topics/orders", nil, http.StatusCreated)
	rest(t, env, "PUT", "/v1/topics/orders/subscriptions/billing", nil, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/orders/events", map[string]any{"events": []any{
		map[string]any{"type": "order.created"}, map[string]any{"type": "order.paid"},
	}}, http.StatusCreated)
	available := func() string {
		return str(rest(t, env, "GET", "/v1/topics/orders/subscriptions/billing", nil, http.StatusOK)["stats"].(map[string]any)["available"])
	}
	require.Equal(t, "2", available())
	const sub = "/ui/topics/orders/subscriptions/billing"

	_, ro := newKey(t, env, "subscription:orders/billing", "read", "receive")
	r := newUI(t, env)
	r.signIn(ro)
	require.NotContains(t, r.get(sub).Body, "Purge messages")
	p := r.post(sub+"/purge", url.Values{"csrf": {r.csrf("/ui/")}, "confirm": {"yes"}})
	require.Equal(t, http.StatusForbidden, p.Status)
	require.Contains(t, p.Body, "subscription:orders/billing manage")
	require.Equal(t, "2", available())

	id, secret := newKey(t, env, "subscription:orders/billing", "read", "receive", "manage")
	u := newUI(t, env)
	u.signIn(secret)
	require.Contains(t, u.get(sub).Body, "Purge messages")
	token := u.csrf(sub)
	p = u.post(sub+"/purge", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Contains(t, p.Body, `name="confirm" value="yes"`)
	require.Equal(t, "2", available(), "nothing purged before the confirmation")
	p = u.post(sub+"/purge", url.Values{"csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, "0", available())
	last := rest(t, env, "GET", "/v1/audit?limit=1", nil, http.StatusOK)["entries"].([]any)[0].(map[string]any)
	require.Equal(t, "messages.purge", last["action"])
	require.Equal(t, "subscription:orders/billing", last["resource"])
	require.Equal(t, id, last["key_id"])
}
