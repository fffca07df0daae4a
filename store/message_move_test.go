package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestMessageMove: a move takes available messages in send order, at
// most its limit, leaves in-flight ones, keeps a group's order, takes off
// the dead-letter attributes, and keeps counters exact; a later move
// takes the rest.
func TestMessageMove(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	src, target := e.dlqPair(1)
	back := e.queue(e.name("back"), store.QueuePatch{})
	sent := resultIDs(e.send(src, msg(0), grouped("g", 1), grouped("g", 2), msg(3), msg(4)))
	// Everything into the target by dead-lettering, one in flight there.
	for range 2 {
		got := e.claim(src, 10, time.Minute)
		e.nack(store.NackParams{Queue: src, Receipts: receipts(got), DeadLetter: true})
	}
	require.Equal(t, store.QueueStats{Available: 5}, e.stats(target))
	inFlight := e.claim(target, 1, time.Minute)
	require.Equal(t, sent[:1], ids(inFlight))
	e.nack(store.NackParams{Queue: target, Receipts: receipts(inFlight), Delay: ptr(time.Hour)})

	n, promoted, err := store.MessageMove(e.ctx, e.db, store.MoveParams{From: target.ID, To: back.ID, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.True(t, promoted, "the group's second is the head in the target now")
	n, _, err = store.MessageMove(e.ctx, e.db, store.MoveParams{From: target.ID, To: back.ID, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 2, n, "the rest but the delayed one")
	require.Equal(t, store.QueueStats{Delayed: 1}, e.stats(target))
	e.requireCountersExact(target)
	e.requireCountersExact(back)

	var order []int64
	for range 4 {
		got := e.claim(back, 1, time.Minute)
		require.Len(t, got, 1)
		for _, m := range got {
			require.Empty(t, attrs(t, m.Attributes), "the dead-letter attributes are taken off")
			require.Equal(t, 1, m.ReceiveCount)
			order = append(order, m.ID)
		}
		require.Equal(t, len(got), len(oks(e.ackAll(back, got))))
	}
	require.Equal(t, sent[1:], order, "in send order, the group in its order")
}
