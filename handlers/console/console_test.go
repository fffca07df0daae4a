package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
