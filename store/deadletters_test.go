package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// deadLetter dead-letters the claimed messages got at once, with errText.
func (e *env) deadLetter(q store.Queue, got []store.Message, errText string) {
	e.t.Helper()
	res, dead := e.nack(store.NackParams{Queue: q, Receipts: receipts(got), DeadLetter: true, Error: ptr(errText)})
	for _, ok := range res {
		require.True(e.t, ok)
	}
	require.Equal(e.t, len(got), dead)
}

func TestDeadLetterRedrive(t *testing.T) {
	t.Parallel()
	setup := txQueueSetup("dlq", store.QueuePatch{MaxReceives: ptr(3)})

	t.Run("ListAndRedriveInSendOrder", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		sent := resultIDs(e.send(q, msg(0), msg(1), msg(2), msg(3), msg(4), msg(5)))
		got := e.claim(q, 6, time.Minute)
		require.Equal(t, sent, ids(got))
		// Dead-lettered out of order, and with receive counts above 1.
		for _, i := range []int{4, 1, 5} {
			e.deadLetter(q, got[i:i+1], "bad")
		}
		for _, i := range []int{0, 2, 3} {
			e.nack(store.NackParams{Queue: q, Receipts: []store.Receipt{got[i].Receipt}, Delay: ptr(time.Duration(0))})
		}
		again := e.claim(q, 6, time.Minute)
		require.Equal(t, []int64{sent[0], sent[2], sent[3]}, ids(again))
		e.deadLetter(q, again, "worse")

		// Listed in send order, paged.
		var listed []int64
		after := int64(0)
		for {
			dls, more, err := store.DeadLetterList(e.ctx, e.db, q.ID, after, 4)
			require.NoError(t, err)
			for _, d := range dls {
				listed = append(listed, d.ID)
				after = d.ID
			}
			if !more {
				break
			}
		}
		require.Equal(t, sent, listed)
		dls, _, err := store.DeadLetterList(e.ctx, e.db, q.ID, 0, 10)
		require.NoError(t, err)
		for _, d := range dls {
			if d.ID == sent[0] {
				require.Equal(t, 2, d.ReceiveCount)
				require.Equal(t, "worse", *d.LastError)
			}
			if d.ID == sent[1] {
				require.Equal(t, 1, d.ReceiveCount)
				require.Equal(t, "bad", *d.LastError)
			}
		}
		require.Equal(t, store.QueueStats{DeadLetters: 6}, e.counts(q))

		// By ids (one unknown, one repeated): only those, in send order.
		n, err := store.DeadLetterRedrive(e.ctx, e.db, store.RedriveParams{QueueID: q.ID, IDs: []int64{sent[4], sent[1], 999999, sent[4]}})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, store.QueueStats{Available: 2, DeadLetters: 4}, e.counts(q))
		back := e.claim(q, 10, time.Minute)
		require.Equal(t, []int64{sent[1], sent[4]}, ids(back))
		for _, m := range back {
			require.Equal(t, 1, m.ReceiveCount, "receive_count was reset")
		}
		require.Equal(t, []bool{true, true}, e.ack(q, receipts(back)...))

		// By limit: the oldest first.
		n, err = store.DeadLetterRedrive(e.ctx, e.db, store.RedriveParams{QueueID: q.ID, Limit: 3})
		require.NoError(t, err)
		require.Equal(t, 3, n)
		back = e.claim(q, 10, time.Minute)
		require.Equal(t, []int64{sent[0], sent[2], sent[3]}, ids(back))
		require.Equal(t, 1, back[0].ReceiveCount)

		// A redriven message keeps its last_error until a new one replaces
		// it, and gets its full max_receives again.
		e.deadLetter(q, back[:1], "again")
		n, err = store.DeadLetterRedrive(e.ctx, e.db, store.RedriveParams{QueueID: q.ID, IDs: []int64{sent[0]}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		for rc := 1; rc <= 3; rc++ {
			got := e.claim(q, 1, time.Minute)
			require.Equal(t, []int64{sent[0]}, ids(got), "receive %d", rc)
			require.Equal(t, rc, got[0].ReceiveCount)
			_, dead := e.nack(store.NackParams{Queue: q, Receipts: receipts(got), Delay: ptr(time.Duration(0))})
			require.Equal(t, map[bool]int{true: 1, false: 0}[rc == 3], dead)
		}
		dls, _, err = store.DeadLetterList(e.ctx, e.db, q.ID, 0, 10)
		require.NoError(t, err)
		require.Len(t, dls, 2)
		require.Equal(t, sent[0], dls[0].ID)
		require.Equal(t, "again", *dls[0].LastError)
		e.requireCountersExact(q)

		require.NoError(t, store.DeadLetterPurge(e.ctx, e.db, q.ID))
		require.Zero(t, e.deadLetters(q))
		e.requireCountersExact(q)
		n, err = store.DeadLetterRedrive(e.ctx, e.db, store.RedriveParams{QueueID: q.ID, Limit: 10})
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("GroupedRedriveKeepsOrder", func(t *testing.T) {
		// g0 is dead-lettered, g1 becomes the head and is in flight, g2
		// waits. Redriven, g0 joins the group behind the current head but
		// ahead of g2: after g1's ack it is delivered before g2.
		t.Parallel()
		e, q := setup(t)
		sent := resultIDs(e.send(q, grouped("g", 0), grouped("g", 1), grouped("g", 2), grouped("h", 0)))
		got := e.claim(q, 10, time.Minute)
		require.ElementsMatch(t, []int64{sent[0], sent[3]}, ids(got))
		for _, m := range got {
			if m.ID == sent[0] {
				e.deadLetter(q, []store.Message{m}, "poison")
			}
		}
		head := e.claim(q, 10, time.Minute)
		require.Equal(t, []int64{sent[1]}, ids(head))

		n, err := store.DeadLetterRedrive(e.ctx, e.db, store.RedriveParams{QueueID: q.ID, IDs: []int64{sent[0]}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Empty(t, e.claim(q, 10, time.Minute), "the redriven message waits behind the group's head")

		require.Equal(t, []bool{true}, e.ack(q, head[0].Receipt))
		var order []int
		for range 2 {
			got := e.claim(q, 10, time.Minute)
			require.Len(t, got, 1)
			require.Equal(t, 1, got[0].ReceiveCount)
			order = append(order, decode(t, got[0].Body).Seq)
			require.Equal(t, []bool{true}, e.ack(q, got[0].Receipt))
		}
		require.Equal(t, []int{0, 2}, order)
		require.Zero(t, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND grp = 'g'`, q.ID))
	})

	t.Run("GroupedRedriveIntoEmptyGroup", func(t *testing.T) {
		// Several dead letters of one group redriven together into a group
		// with no live messages: one head, the rest waiting, in send order.
		t.Parallel()
		e, q := setup(t)
		e.send(q, grouped("g", 0), grouped("g", 1), grouped("g", 2))
		for range 3 {
			got := e.claim(q, 10, time.Minute)
			require.Len(t, got, 1)
			e.deadLetter(q, got, "x")
		}
		n, err := store.DeadLetterRedrive(e.ctx, e.db, store.RedriveParams{QueueID: q.ID, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, 3, n)
		require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND NOT waiting`, q.ID))
		for seq := range 3 {
			got := e.claim(q, 10, time.Minute)
			require.Len(t, got, 1)
			require.Equal(t, seq, decode(t, got[0].Body).Seq)
			require.Equal(t, []bool{true}, e.ack(q, got[0].Receipt))
		}
		e.requireCountersExact(q)
	})
}
