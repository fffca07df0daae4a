package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestConsoleTopicAndGroup proves the topic and group pages: the topic
// page lists its partitions, its events (markup in them as text), its
// subscriptions and groups, and says when an offset has no events; a
// group seek asks for a confirmation first, then seeks through REST
// (audited as group.seek); a malformed seek and an unknown topic are
// readable error pages.
func TestConsoleTopicAndGroup(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	rest(t, env, "PUT", "/v1/topics/tp", map[string]any{"partitions": 1}, http.StatusCreated)
	rest(t, env, "PUT", "/v1/topics/tp/subscriptions/s1", nil, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/tp/events", map[string]any{"events": []any{
		map[string]any{"type": "order.created", "data": map[string]any{"note": "<b>bold</b>"}},
		map[string]any{"type": "order.paid"},
	}}, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/tp/groups/g1/poll", map[string]any{"consumer": "c"}, http.StatusOK)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)

	p := u.get("/ui/topics/tp")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Contains(t, p.Body, `id="partitions"`)
	events := p.Body[strings.Index(p.Body, `id="events"`):]
	require.Contains(t, events, "order.created")
	require.Contains(t, events, "order.paid")
	require.Contains(t, events, "&lt;b&gt;bold&lt;/b&gt;")
	require.NotContains(t, p.Body, "<b>")
	require.Contains(t, p.Body, `href="/ui/topics/tp/subscriptions/s1"`)
	require.Contains(t, p.Body, `href="/ui/topics/tp/groups/g1"`)
	p = u.get("/ui/topics/tp?partition=0&from_offset=1000")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "No events from there.")
	require.NotContains(t, p.Body, `id="events"`)

	token := u.csrf("/ui/topics/tp/groups/g1")
	p = u.post("/ui/topics/tp/groups/g1/seek", url.Values{"csrf": {token}, "to": {"latest"}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Contains(t, p.Body, `name="confirm" value="yes"`)
	lastAction := func() any {
		return rest(t, env, "GET", "/v1/audit?limit=1", nil, http.StatusOK)["entries"].([]any)[0].(map[string]any)["action"]
	}
	require.NotEqual(t, "group.seek", lastAction(), "not before the confirmation")
	p = u.post("/ui/topics/tp/groups/g1/seek", url.Values{"csrf": {token}, "to": {"latest"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Contains(t, p.Body, "Seek the group to latest")
	require.Equal(t, "group.seek", lastAction())

	p = u.post("/ui/topics/tp/groups/g1/seek", url.Values{"csrf": {token}, "partition": {"0"}, "offset": {"1.5"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Body, "whole numbers")
	p = u.get("/ui/topics/nope")
	require.Equal(t, http.StatusNotFound, p.Status)
	require.Contains(t, p.Body, `id="error"`)
}
