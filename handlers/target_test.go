package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

func TestPurge(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "p", nil)
	send(t, env, "p", msg(1), msg(2), msg(3), msg("delayed", "delay_seconds", 600))
	dead := receive(t, env, "p", nil)
	require.Equal(t, []string{"ok"}, settle(t, env, "p", "nack", map[string]any{"receipts": receipts(dead), "dead_letter": true}))
	inFlight := receive(t, env, "p", map[string]any{"visibility_timeout_seconds": 600})
	require.Len(t, inFlight, 1)
	require.Equal(t, client.QueueStats{Available: 1, InFlight: 1, Delayed: 1, DeadLetters: 1}, counts(t, env, "p"))

	// Purging messages drops available, delayed and in-flight; keeps dead letters.
	r := env.Do("DELETE", "/v1/queues/p/messages", nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	require.Empty(t, r.Body)
	require.Equal(t, client.QueueStats{DeadLetters: 1}, stats(t, env, "p"))
	require.Equal(t, []string{"stale"}, ack(t, env, "p", inFlight[0].Receipt), "a purged message's receipt is stale")
	require.Equal(t, []string{"stale"}, settle(t, env, "p", "extend",
		map[string]any{"receipts": receipts(inFlight), "visibility_timeout_seconds": 5}))
	require.Empty(t, receive(t, env, "p", map[string]any{"max_messages": 10}))

	// Purging dead letters.
	r = env.Do("DELETE", "/v1/queues/p/dead-letters", nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	require.Empty(t, r.Body)
	require.Equal(t, client.QueueStats{}, stats(t, env, "p"))
	page := deadLetters(t, env, "p", "")
	require.Empty(t, page.Messages)
	require.Nil(t, page.Next)

	// Purging an empty queue is still 204; the queue still works.
	require.Equal(t, http.StatusNoContent, env.Do("DELETE", "/v1/queues/p/messages", nil).Status)
	require.Equal(t, http.StatusNoContent, env.Do("DELETE", "/v1/queues/p/dead-letters", nil).Status)
	send(t, env, "p", msg("after purge"))
	require.Len(t, receive(t, env, "p", nil), 1)
}

func TestUnknownQueue(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "real", nil)
	send(t, env, "real", msg(1))
	got := receive(t, env, "real", map[string]any{"visibility_timeout_seconds": 3600})
	require.Len(t, got, 1)
	rc := []string{got[0].Receipt}
	nf := http.StatusNotFound
	cases := []badCase{
		{"get", "GET", "/v1/queues/ghost", nil, nil, nf, "not_found"},
		{"delete", "DELETE", "/v1/queues/ghost", nil, nil, nf, "not_found"},
		{"send", "POST", "/v1/queues/ghost/messages", map[string]any{"messages": []any{msg(1)}}, nil, nf, "not_found"},
		{"purge", "DELETE", "/v1/queues/ghost/messages", nil, nil, nf, "not_found"},
		{"receive", "POST", "/v1/queues/ghost/receive", map[string]any{}, nil, nf, "not_found"},
		{"receive no body", "POST", "/v1/queues/ghost/receive", nil, nil, nf, "not_found"},
		{"receive long poll", "POST", "/v1/queues/ghost/receive", map[string]any{"wait_seconds": 5}, nil, nf, "not_found"},
		{"ack", "POST", "/v1/queues/ghost/ack", map[string]any{"receipts": rc}, nil, nf, "not_found"},
		{"nack", "POST", "/v1/queues/ghost/nack", map[string]any{"receipts": rc, "dead_letter": true}, nil, nf, "not_found"},
		{"extend", "POST", "/v1/queues/ghost/extend", map[string]any{"receipts": rc, "visibility_timeout_seconds": 1}, nil, nf, "not_found"},
		{"dead letters", "GET", "/v1/queues/ghost/dead-letters", nil, nil, nf, "not_found"},
		{"purge dead letters", "DELETE", "/v1/queues/ghost/dead-letters", nil, nil, nf, "not_found"},
		{"redrive ids", "POST", "/v1/queues/ghost/dead-letters/redrive", map[string]any{"ids": []string{got[0].ID}}, nil, nf, "not_found"},
		{"redrive limit", "POST", "/v1/queues/ghost/dead-letters/redrive", map[string]any{"limit": 10}, nil, nf, "not_found"},
	}
	runBadCases(t, env, cases)
	require.Equal(t, []string{"ok"}, ack(t, env, "real", rc...), "the real queue's receipt was not touched")
}

// TestSubscriptionPurge: DELETE .../subscriptions/{sub}/messages drops a
// subscription's available, delayed and in-flight deliveries, keeps its
// dead letters and the topic's log, leaves other subscriptions alone, and
// the subscription goes on receiving; it is 404 for an unknown topic or
// subscription, 400 for a bad name or query, 403 without manage (as the
// queue's purge), and writes nothing when refused.
func TestSubscriptionPurge(t *testing.T) {
	t.Parallel()
	keys := testKeys{"reader": scoped(t, "key_r", perm("subscription:t/s", "read", "receive"))}
	env := ferrytest.Start(t, withKeys(keys))
	putTopic(t, env, "t", map[string]any{"partitions": 1}, http.StatusCreated)
	putSub(t, env, "t", "s", map[string]any{"max_receives": 5}, http.StatusCreated)
	putSub(t, env, "t", "other", nil, http.StatusCreated)
	publishEvents(t, env, "t", evt("a", "id", "e1"), evt("a", "id", "e2"), evt("a", "id", "e3"))
	dead := receiveSub(t, env, "t", "s", map[string]any{"max_messages": 1})
	require.Equal(t, []string{"ok"}, settleSub(t, env, "t", "s", "nack", map[string]any{"receipts": subReceipts(dead), "dead_letter": true}))
	fly := receiveSub(t, env, "t", "s", map[string]any{"max_messages": 1, "visibility_timeout_seconds": 600})
	require.Equal(t, client.QueueStats{Available: 1, InFlight: 1, DeadLetters: 1}, subCounts(t, env, "t", "s"))

	nf, bad, inv := http.StatusNotFound, http.StatusBadRequest, "invalid_request"
	runBadCases(t, env, []badCase{
		{"unknown subscription", "DELETE", spath("t", "ghost", "/messages"), nil, nil, nf, "not_found"},
		{"unknown topic", "DELETE", spath("ghost", "s", "/messages"), nil, nil, nf, "not_found"},
		{"bad subscription name", "DELETE", spath("t", "a%20b", "/messages"), nil, nil, bad, inv},
		{"bad topic name", "DELETE", spath("a:b", "s", "/messages"), nil, nil, bad, inv},
		{"query parameter", "DELETE", spath("t", "s", "/messages") + "?state=available", nil, nil, bad, inv},
		{"without manage", "DELETE", spath("t", "s", "/messages"), nil, bearer("reader"), http.StatusForbidden, "forbidden"},
	})
	require.Equal(t, client.QueueStats{Available: 1, InFlight: 1, DeadLetters: 1}, subCounts(t, env, "t", "s"), "refusals purged nothing")

	r := env.Do("DELETE", spath("t", "s", "/messages"), nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	require.Empty(t, r.Body)
	require.Equal(t, client.QueueStats{DeadLetters: 1}, subCounts(t, env, "t", "s"), "dead letters kept")
	require.Equal(t, []string{"stale"}, ackSub(t, env, "t", "s", subReceipts(fly)...), "a purged delivery's receipt is stale")
	require.Equal(t, client.QueueStats{Available: 3}, subCounts(t, env, "t", "other"), "other subscriptions keep theirs")
	require.Len(t, logEvents(t, env, "t"), 3, "the topic's log is kept")
	require.Equal(t, http.StatusNoContent, env.Do("DELETE", spath("t", "s", "/messages"), nil).Status, "an empty purge is still 204")
	publishEvents(t, env, "t", evt("a", "id", "e4"))
	got := receiveSub(t, env, "t", "s", nil)
	require.Equal(t, []string{"e4"}, subIDs(got), "later events are delivered as usual")
}
