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

// TestConsoleBadInput proves that what a console form can be made to
// carry (unknown ids, malformed values, huge bodies, markup) answers a
// readable HTML error page, never a 500, and writes nothing: the REST
// route refuses it whole, before any change.
func TestConsoleBadInput(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	rest(t, env, "PUT", "/v1/queues/bad", nil, http.StatusCreated)
	deadLetterAll(t, env, "bad", "boom", 1, 2)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	token := u.csrf("/ui/")
	form := func(kv ...string) url.Values {
		v := url.Values{"csrf": {token}, "confirm": {"yes"}}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	keysBefore := len(rest(t, env, "GET", "/v1/keys", nil, http.StatusOK)["keys"].([]any))
	for _, c := range []struct {
		path   string
		form   url.Values
		status int
		says   string
	}{
		{"/ui/queues/nope/redrive", form(), http.StatusNotFound, "404 Not Found"},
		{"/ui/topics/t/subscriptions/s/seek", form("to", "<script>x</script>"), http.StatusBadRequest, "to"},
		{"/ui/topics/t/groups/g/seek", form("partition", "x", "offset", "1"), http.StatusBadRequest, "whole numbers"},
		{"/ui/keys", form("name", "k", "resource", "<b>queue:*", "action", "read"), http.StatusBadRequest, "resource"},
		{"/ui/keys", form("name", "k", "resource", "queue:*", "action", "fly"), http.StatusBadRequest, "fly"},
		{"/ui/keys/key_999999/revoke", form(), http.StatusNotFound, "404 Not Found"},
		{"/ui/keys/%3Cscript%3E/revoke", form(), http.StatusNotFound, "404 Not Found"},
		{"/ui/queues/bad/purge", url.Values{"csrf": {token}, "confirm": {"yes"}, "pad": {strings.Repeat("x", 100_000)}}, http.StatusForbidden, "CSRF"},
	} {
		p := u.post(c.path, c.form)
		require.Equal(t, c.status, p.Status, "%s: %s", c.path, p.Body)
		require.Contains(t, p.Header.Get("Content-Type"), "text/html", c.path)
		require.Contains(t, p.Body, `id="error"`, c.path)
		require.Contains(t, p.Body, c.says, c.path)
		require.NotContains(t, p.Body, "<script>", c.path)
		require.NotContains(t, p.Body, "<b>", c.path)
	}
	s := stats(t, env, "bad")
	require.Equal(t, "2", str(s["dead_letters"]), "no redrive happened")
	require.Len(t, rest(t, env, "GET", "/v1/keys", nil, http.StatusOK)["keys"].([]any), keysBefore, "no key was made")

	// An id no dead letter has (as REST: ids that name none are ignored)
	// redrives nothing, and says so.
	for _, id := range []string{"424242", "not-an-id", strings.Repeat("9", 190), "<script>"} {
		p := u.post("/ui/queues/bad/redrive", form("id", id))
		require.Equal(t, http.StatusOK, p.Status)
		require.Contains(t, p.Body, "0 redriven")
		require.NotContains(t, p.Body, "<script>")
	}
	require.Equal(t, "2", str(stats(t, env, "bad")["dead_letters"]))
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

// TestConsoleKeys proves the keys page: a key made there works at once
// and its secret is shown on that answer only; revoking it (after a
// confirmation) ends it.
func TestConsoleKeys(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	token := u.csrf("/ui/keys")
	p := u.post("/ui/keys", url.Values{"csrf": {token}, "name": {"reader"}, "resource": {"queue:*"}, "action": {"read"}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	m := regexp.MustCompile(`id="secret">([^<]+)<`).FindStringSubmatch(p.Body)
	require.NotNil(t, m)
	secret := m[1]
	require.Equal(t, http.StatusOK, env.DoWith("GET", "/v1/queues", nil, http.Header{"Authorization": {"Bearer " + secret}}).Status)
	page := u.get("/ui/keys")
	require.Contains(t, page.Body, "reader")
	require.NotContains(t, page.Body, secret, "shown once")
	id := regexp.MustCompile(`action="/ui/keys/(key_[0-9]+)/revoke"`).FindStringSubmatch(page.Body)[1]

	p = u.post("/ui/keys/"+id+"/revoke", url.Values{"csrf": {token}})
	require.Contains(t, p.Body, `name="confirm" value="yes"`)
	require.Equal(t, http.StatusOK, env.DoWith("GET", "/v1/queues", nil, http.Header{"Authorization": {"Bearer " + secret}}).Status, "not before the confirmation")
	p = u.post("/ui/keys/"+id+"/revoke", url.Values{"csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, http.StatusUnauthorized, env.DoWith("GET", "/v1/queues", nil, http.Header{"Authorization": {"Bearer " + secret}}).Status)
}
