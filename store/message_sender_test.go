package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/store"
)

// Invariant 1: a send answers only after its transaction committed, and
// group commit loses nothing.
func TestSendGroupCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var (
		mu        sync.Mutex
		announced = map[int64]int{}
	)
	sender := e.newSender(store.SenderConfig{Committed: func(queueIDs []int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range queueIDs {
			announced[id]++
		}
	}})
	q := e.queue("gc", store.QueuePatch{})
	other := e.queue("gc-other", store.QueuePatch{})
	// A separate pool: a read through it can only see committed rows.
	reader := e.newPool(4)

	const n = 64
	got, errs := make([]int64, n), make([]error, n)
	atOnce(n, func(i int) {
		target := q
		if i%4 == 3 {
			target = other
		}
		res, qid, err := sender.Send(context.Background(), target.Name, []store.SendMessage{msg(i)})
		if err != nil {
			errs[i] = err
			return
		}
		if qid != target.ID || len(res) != 1 || res[0].Duplicate {
			errs[i] = fmt.Errorf("send %d: queue %d, results %+v", i, qid, res)
			return
		}
		got[i] = res[0].ID
		// Immediately after the answer, another connection sees the
		// message with the body that was sent.
		var seq int
		err = reader.QueryRow(context.Background(),
			`SELECT (body->>'seq')::int FROM ferry.messages WHERE queue_id = $1 AND id = $2`, target.ID, res[0].ID).Scan(&seq)
		if err != nil {
			errs[i] = fmt.Errorf("send %d: message %d not readable after Send returned: %w", i, res[0].ID, err)
			return
		}
		if seq != i {
			errs[i] = fmt.Errorf("send %d: message %d holds seq %d", i, res[0].ID, seq)
		}
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	seen := map[int64]bool{}
	for i, id := range got {
		require.False(t, seen[id], "id %d answered twice (send %d)", id, i)
		seen[id] = true
	}
	require.EqualValues(t, 3*n/4, e.live(q))
	require.EqualValues(t, n/4, e.live(other))
	mu.Lock()
	require.Positive(t, announced[q.ID], "Committed announces the queues written to")
	require.Positive(t, announced[other.ID])
	mu.Unlock()
	e.requireCountersExact(q)
	e.requireCountersExact(other)
}

// A send stuck behind a lock held elsewhere gives up after the lock
// timeout with ErrBusy, instead of holding up sends to other queues.
func TestSendLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	a, _, err := store.QueueUpsert(ctx, pool, "held", store.QueuePatch{})
	require.NoError(t, err)
	_, _, err = store.QueueUpsert(ctx, pool, "free", store.QueuePatch{})
	require.NoError(t, err)
	s := store.NewSender(pool, store.SenderConfig{Workers: 2})
	defer s.Close()

	// Another session holds queue "held" exclusively (as a purge does).
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(ferry.queue_lock_key($1))`, a.ID)
	require.NoError(t, err)

	blocked := make(chan error, 1)
	go func() {
		_, _, err := s.Send(ctx, "held", []store.SendMessage{{Body: json.RawMessage(`1`)}})
		blocked <- err
	}()
	// Sends to another queue still complete while that one waits.
	start := time.Now()
	_, _, err = s.Send(ctx, "free", []store.SendMessage{{Body: json.RawMessage(`2`)}})
	require.NoError(t, err)
	err = <-blocked
	require.ErrorIs(t, err, store.ErrBusy)
	require.Less(t, time.Since(start), 20*time.Second)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, a.ID).Scan(&n))
	require.Zero(t, n, "the busy send wrote nothing")
}
