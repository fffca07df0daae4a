package store_test

import (
	"context"
	"fmt"
	"sync"
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

// fillDeadGroups inserts n dead letters of q straight in SQL: n-300 in
// groups of their own, then 100 groups of three ("multi-<k>").
func fillDeadGroups(t *testing.T, e *env, q store.Queue, n int) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		INSERT INTO ferry.dead_letters (queue_id, id, sent_at, receive_count, grp, body)
		SELECT $1, nextval('ferry.message_id_seq'), now(), 5, grp, '{}'
		FROM (
			SELECT 'solo-' || g AS grp, g AS k FROM generate_series(1, $2 - 300) AS g
			UNION ALL
			SELECT 'multi-' || (g % 100), $2 + g FROM generate_series(1, 300) AS g
			ORDER BY k
		) s`, q.ID, n)
	require.NoError(t, err)
}

// requireRedrivenInOrder checks that q holds n live messages and no dead
// letters, and that every group has exactly one head, its oldest message.
func requireRedrivenInOrder(t *testing.T, e *env, q store.Queue, n int64) {
	t.Helper()
	require.EqualValues(t, n, e.live(q))
	require.Zero(t, e.deadLetters(q))
	require.Zero(t, e.count(`
		SELECT count(*) FROM (
			SELECT grp, count(*) FILTER (WHERE NOT waiting) AS heads,
				min(id) FILTER (WHERE NOT waiting) AS head, min(id) AS oldest
			FROM ferry.messages WHERE queue_id = $1 GROUP BY grp
		) g WHERE heads <> 1 OR head <> oldest`, q.ID), "groups whose head is not their oldest message")
	e.requireCountersExact(q)
}

// TestRedriveManyGroupsConcurrently: redrives take a bounded number of
// locks (issue 8). Redrives of 10,000 dead letters in distinct groups, in
// three queues at once and three at once on one queue, each of
// everything, never exhaust the server's lock table
// (max_locks_per_transaction): one group lock a group in one transaction
// used to take 10,000 each and fail with "out of shared memory". Every dead
// letter moves exactly once, and groups keep their order.
func TestRedriveManyGroupsConcurrently(t *testing.T) {
	t.Parallel()
	const n = 10000
	e := newEnv(t)
	var queues []store.Queue
	for i := range 3 {
		q := e.queue(fmt.Sprintf("many-groups-%d", i), store.QueuePatch{})
		fillDeadGroups(t, e, q, n)
		queues = append(queues, q)
	}
	shared := e.queue("many-groups-shared", store.QueuePatch{})
	fillDeadGroups(t, e, shared, n)

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		moved = map[int64]int{}
		errs  []error
	)
	redrive := func(q store.Queue) {
		wg.Go(func() {
			got, err := store.DeadLetterRedrive(context.Background(), e.pool, store.RedriveParams{QueueID: q.ID, Limit: n})
			mu.Lock()
			defer mu.Unlock()
			moved[q.ID] += got
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	for _, q := range queues {
		redrive(q)
	}
	for range 3 {
		redrive(shared)
	}
	wg.Wait()
	require.Empty(t, errs)
	for _, q := range append(queues, shared) {
		require.Equal(t, n, moved[q.ID], "queue %s: redriven", q.Name)
		requireRedrivenInOrder(t, e, q, n)
	}
}

// TestRedriveIDsAcrossBatches: a redrive by ids larger than one batch
// (ids given in any order, some repeated or unknown) moves each dead letter
// once, in id order, so each group's head is its oldest message even when
// the group spans batches.
func TestRedriveIDsAcrossBatches(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	q := e.queue(e.name("by-ids"), store.QueuePatch{})
	_, err := e.db.Exec(e.ctx, `
		INSERT INTO ferry.dead_letters (queue_id, id, sent_at, receive_count, grp, body)
		SELECT $1, nextval('ferry.message_id_seq'), now(), 5, 'g' || (k % 7), '{}'
		FROM generate_series(1, 1300) AS k ORDER BY k`, q.ID)
	require.NoError(t, err)
	ids := e.int64s(`SELECT id FROM ferry.dead_letters WHERE queue_id = $1 ORDER BY id DESC`, q.ID)
	require.Len(t, ids, 1300)
	ids = append(ids, ids[:10]...)    // repeats
	ids = append(ids, 1<<62, 1<<62+1) // unknown
	n, err := store.DeadLetterRedrive(e.ctx, e.db, store.RedriveParams{QueueID: q.ID, IDs: ids})
	require.NoError(t, err)
	require.Equal(t, 1300, n)
	requireRedrivenInOrder(t, e, q, 1300)
	// And they are delivered in send order, one at a time a group.
	last := map[string]int64{}
	for range 3 {
		got := e.claim(q, 100, time.Minute)
		require.Len(t, got, 7, "one head a group")
		for _, m := range got {
			require.Greater(t, m.ID, last[*m.Group], "group %s in send order", *m.Group)
			last[*m.Group] = m.ID
		}
		for _, ok := range e.ack(q, receipts(got)...) {
			require.True(t, ok)
		}
	}
}

// TestRedriveKeepsOrderedGroupClaimable: DeadLetterRedrive computes each
// redriven row's "waiting" flag before ON CONFLICT DO NOTHING drops rows
// whose event is pending again. When the dropped row was the one chosen as
// its group's head (row_number() = 1), the rest of the group is inserted
// waiting behind no head, and nothing ever promotes it.
func TestRedriveKeepsOrderedGroupClaimable(t *testing.T) {
	e, tp := newTopicEnv(t, "t", 1)
	s, _ := e.subscribe(tp, "s", "", store.SubscriptionPatch{
		Ordered: ptr(true),
		Queue:   store.QueuePatch{MaxReceives: ptr(1)},
	})
	key := "K"
	e.publish(tp,
		store.PublishEvent{ID: "e1", Type: "x", Key: &key},
		store.PublishEvent{ID: "e2", Type: "x", Key: &key})

	// Both events dead-lettered, one after the other (ordered: e2 waits
	// behind e1 until e1 is gone).
	for _, want := range []string{"e1", "e2"} {
		got := e.claim(s.Queue, 10, time.Minute)
		require.Len(t, got, 1)
		require.Equal(t, want, *got[0].EventID)
		_, dead := e.nack(store.NackParams{Queue: s.Queue, Receipts: receipts(got)})
		require.Equal(t, 1, dead)
	}
	require.EqualValues(t, 2, e.deadLetters(s.Queue))

	// The subscription stops being ordered and is rewound: e1 and e2 are
	// pending again, ungrouped. The consumer handles e2 only.
	s2, created, _, err := store.SubscriptionUpsert(e.ctx, e.pool, tp, "s", store.SubscriptionPatch{
		Ordered: ptr(false),
		Queue:   store.QueuePatch{MaxReceives: ptr(5)},
	})
	require.NoError(t, err)
	require.False(t, created)
	n, err := store.SubscriptionSeek(e.ctx, e.pool, s2, store.StartPosition{Earliest: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	got := e.claim(s2.Queue, 10, time.Minute)
	require.Len(t, got, 2)
	var e1 store.Message
	for _, m := range got {
		if *m.EventID == "e2" {
			require.Equal(t, []bool{true}, e.ack(s2.Queue, m.Receipt))
		} else {
			e1 = m
		}
	}

	// Redrive both dead letters: e1's is dropped (its event is pending),
	// e2's goes back into the queue.
	redriven, err := store.DeadLetterRedrive(e.ctx, e.pool, store.RedriveParams{QueueID: s2.ID, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 1, redriven, "e2 redriven")

	// Finish e1's pending delivery. e2 is now the only message of the
	// subscription: it must be deliverable.
	require.Equal(t, []bool{true}, e.ack(s2.Queue, e1.Receipt))
	for _, d := range e.deliveries(s2.ID) {
		t.Logf("live delivery: event %s grp %v waiting %v", d.EventID, deref(d.Grp), d.Waiting)
	}
	again := e.claim(s2.Queue, 10, time.Minute)
	require.Len(t, again, 1, "the redriven e2 can never be claimed: it waits behind a head that was never inserted")
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}
