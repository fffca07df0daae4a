package handlers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

type peekedJSON struct {
	ID           string         `json:"id"`
	Body         any            `json:"body"`
	Event        map[string]any `json:"event"`
	ReceiveCount int            `json:"receive_count"`
	VisibleAt    time.Time      `json:"visible_at"`
	State        string         `json:"state"`
}

var peekedKeys = []string{"id", "body", "attributes", "group", "dedup_id", "receive_count", "sent_at", "visible_at", "state"}

func peek(t testing.TB, env *ferrytest.Env, path string) pageJSON[peekedJSON] {
	t.Helper()
	r := env.Do("GET", path, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var p pageJSON[peekedJSON]
	r.JSON(t, &p)
	return p
}

// TestMessagePeekREST proves GET .../messages on queues and subscriptions:
// every state shown and filtered, pages that cover each message once,
// nothing claimed (stats and receive counts unchanged, a receive after
// still gets the messages), receive needed, bad parameters 400.
func TestMessagePeekREST(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "pk", nil)
	sent := ids(send(t, env, "pk", msg(0), msg(1), msg(2, "delay_seconds", 600), msg("<script>alert(1)</script>")))
	got := receive(t, env, "pk", map[string]any{"max_messages": 1})
	require.Equal(t, sent[:1], msgIDs(got))
	depth := func() client.QueueStats {
		s := stats(t, env, "pk")
		s.OldestAgeSeconds = 0 // it grows with the clock, not with a change
		return s
	}
	before := depth()

	all := peek(t, env, qpath("pk", "/messages"))
	require.Nil(t, all.Next)
	require.Equal(t, sent, pluck(all.Messages, func(m peekedJSON) string { return m.ID }))
	require.Equal(t, []string{"in_flight", "available", "delayed", "available"}, pluck(all.Messages, func(m peekedJSON) string { return m.State }))
	require.Equal(t, []int{1, 0, 0, 0}, pluck(all.Messages, func(m peekedJSON) int { return m.ReceiveCount }))
	requireKeys(t, env.Do("GET", qpath("pk", "/messages?limit=1"), nil).Map(t)["messages"].([]any)[0].(map[string]any), peekedKeys, "a peeked message")

	var paged []string
	for after := ""; ; {
		p := peek(t, env, qpath("pk", "/messages?limit=3"+after))
		paged = append(paged, pluck(p.Messages, func(m peekedJSON) string { return m.ID })...)
		if p.Next == nil {
			break
		}
		after = "&after=" + *p.Next
	}
	require.Equal(t, sent, paged)
	for state, want := range map[string][]string{"available": {sent[1], sent[3]}, "in_flight": sent[:1], "delayed": {sent[2]}} {
		p := peek(t, env, qpath("pk", "/messages?state="+state))
		require.Equal(t, want, pluck(p.Messages, func(m peekedJSON) string { return m.ID }), state)
	}
	require.Equal(t, before, depth(), "a peek changes nothing")
	require.Equal(t, []string{sent[1], sent[3]}, msgIDs(receive(t, env, "pk", map[string]any{"max_messages": 10})))

	for _, q := range []string{"state=ready", "state=", "limit=0", "limit=1001", "after=x", "receipt=1"} {
		requireProblem(t, env.Do("GET", qpath("pk", "/messages?"+q), nil), http.StatusBadRequest, "invalid_request")
	}
	requireProblem(t, env.Do("GET", qpath("nope", "/messages"), nil), http.StatusNotFound, "not_found")
	reader := createKey(t, env, "reader", nil, kperm("queue:pk", "read", "manage"))
	p := requireProblem(t, env.DoWith("GET", qpath("pk", "/messages"), nil, bearer(reader.Secret)), http.StatusForbidden, "forbidden")
	require.Contains(t, p["detail"], "queue:pk receive")

	// A subscription's deliveries carry their events.
	putTopic(t, env, "t", nil, http.StatusCreated)
	putSub(t, env, "t", "s", nil, http.StatusCreated)
	publishEvents(t, env, "t", evt("a", "id", "e1"), evt("b", "id", "e2"))
	sp := peek(t, env, spath("t", "s", "/messages?limit=1"))
	require.Equal(t, "e1", sp.Messages[0].ID)
	require.Equal(t, "a", sp.Messages[0].Event["type"])
	require.Equal(t, "available", sp.Messages[0].State)
	require.NotNil(t, sp.Next)
	sp = peek(t, env, spath("t", "s", "/messages?after="+*sp.Next))
	require.Equal(t, "e2", sp.Messages[0].ID)
	require.Nil(t, sp.Next)
	require.Len(t, receiveAll(t, env, "t", "s"), 2, "the peeks claimed nothing")
}
