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
