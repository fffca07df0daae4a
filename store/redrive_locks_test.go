package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

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
