package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestMessagePeek proves that a peek shows a queue's messages in id order
// with their states, pages and filters them, and changes nothing: it runs
// in a read-only transaction (any write would fail), and a claim after it
// finds every message as it was.
func TestMessagePeek(t *testing.T) {
	t.Parallel()
	e, q := txQueueSetup("peek", store.QueuePatch{})(t)
	delayed := msg(2)
	delayed.Delay = ptr(time.Hour)
	sent := resultIDs(e.send(q, msg(0), msg(1), delayed, grouped("g", 3), grouped("g", 4)))
	claimed := e.claim(q, 1, time.Minute)
	require.Equal(t, sent[:1], ids(claimed))

	peek := func(p store.PeekParams) ([]store.PeekedMessage, bool) {
		t.Helper()
		p.QueueID = q.ID
		_, err := e.tx.Exec(e.ctx, "SAVEPOINT peek; SET TRANSACTION READ ONLY")
		require.NoError(t, err)
		got, more, err := store.MessagePeek(e.ctx, e.tx, p)
		require.NoError(t, err)
		_, err = e.tx.Exec(e.ctx, "ROLLBACK TO SAVEPOINT peek")
		require.NoError(t, err)
		return got, more
	}
	peekIDs := func(ms []store.PeekedMessage) []int64 {
		return each(ms, func(m store.PeekedMessage) int64 { return m.ID })
	}

	all, more := peek(store.PeekParams{Limit: 10})
	require.False(t, more)
	require.Equal(t, sent, peekIDs(all))
	require.Equal(t, []string{"in_flight", "available", "delayed", "available", "available"},
		each(all, func(m store.PeekedMessage) string { return m.State }))
	require.Equal(t, 1, all[0].ReceiveCount)
	require.JSONEq(t, `{"seq":1}`, string(all[1].Body))
	require.Equal(t, "g", *all[3].Group)

	first, more := peek(store.PeekParams{Limit: 2})
	require.True(t, more)
	require.Equal(t, sent[:2], peekIDs(first))
	rest, more := peek(store.PeekParams{Limit: 2, After: first[1].ID})
	require.True(t, more)
	require.Equal(t, sent[2:4], peekIDs(rest))

	for state, want := range map[string][]int64{
		store.StateAvailable: {sent[1], sent[3], sent[4]},
		store.StateInFlight:  {sent[0]},
		store.StateDelayed:   {sent[2]},
	} {
		got, _ := peek(store.PeekParams{Limit: 10, State: state})
		require.Equal(t, want, peekIDs(got), state)
	}
	_, _, err := store.MessagePeek(e.ctx, e.tx, store.PeekParams{QueueID: q.ID, Limit: 1, State: "gone"})
	var verr *store.ValidationError
	require.ErrorAs(t, err, &verr)

	// Nothing was claimed by the peeks: the next claim gets msg 1 and the
	// group's head, and receive counts are as they were.
	again := e.claim(q, 10, time.Minute)
	require.Equal(t, []int64{sent[1], sent[3]}, ids(again))
	require.Equal(t, 1, again[0].ReceiveCount)
}
