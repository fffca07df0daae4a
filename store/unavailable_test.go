package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// poolWith opens a pool on the test's database whose sessions have the
// given settings (or connect as another user), closed at cleanup.
func (e *env) poolWith(user string, params map[string]string) *pgxpool.Pool {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	require.NoError(e.t, err)
	cfg.MaxConns = 2
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	if user != "" {
		cfg.ConnConfig.User = user
	}
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(pool.Close)
	return pool
}

// holdQueueLock takes q's lock exclusively in a session of its own (as a
// purge or a queue delete does) until the test ends.
func (e *env) holdQueueLock(q store.Queue) {
	e.t.Helper()
	conn, err := e.pool.Acquire(e.ctx)
	require.NoError(e.t, err)
	_, err = conn.Exec(e.ctx, `SELECT pg_advisory_lock(ferry.queue_lock_key($1))`, q.ID)
	require.NoError(e.t, err)
	e.t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`)
		conn.Release()
	})
}

// TestDatabaseLimitsAreRetryable: where the database refuses work at one
// of its own limits, the store answers a sentinel that the API turns into
// 503 + Retry-After (handlers/problem.go), never an unknown error (500).
// Each error here is a real one from PostgreSQL, met by a store function.
func TestDatabaseLimitsAreRetryable(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "limited", store.QueuePatch{})
	fillDeadGroups(t, e, q, 400)
	e.holdQueueLock(q)

	t.Run("LockTimeout", func(t *testing.T) {
		// 55P03 lock_not_available: ErrBusy.
		db := e.poolWith("", map[string]string{"lock_timeout": "50ms"})
		_, err := store.DeadLetterRedrive(e.ctx, db, store.RedriveParams{QueueID: q.ID, Limit: 10})
		require.ErrorIs(t, err, store.ErrBusy)
	})
	t.Run("StatementTimeout", func(t *testing.T) {
		// 57014 query_canceled by the server's statement_timeout.
		db := e.poolWith("", map[string]string{"statement_timeout": "50ms"})
		_, err := store.DeadLetterRedrive(e.ctx, db, store.RedriveParams{QueueID: q.ID, Limit: 10})
		require.ErrorIs(t, err, store.ErrUnavailable)
	})
	t.Run("ClientCancelIsNot", func(t *testing.T) {
		// The same wait cut by the client's own context is not the
		// database's limit.
		ctx, cancel := context.WithCancel(e.ctx)
		db := e.poolWith("", map[string]string{"application_name": "ferry-cancelled"})
		go func() {
			e.activityWaitingEventually("ferry-cancelled")
			cancel()
		}()
		_, err := store.DeadLetterRedrive(ctx, db, store.RedriveParams{QueueID: q.ID, Limit: 10})
		t.Logf("cancelled: %v", err)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, store.ErrUnavailable)
		require.NotErrorIs(t, err, store.ErrBusy)
	})
	t.Run("TooManyConnections", func(t *testing.T) {
		// 53300 too_many_connections, at connect: a role allowed none.
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		role := "ferry_noconn_" + hex.EncodeToString(b)
		_, err := e.pool.Exec(e.ctx, `CREATE ROLE `+role+` LOGIN CONNECTION LIMIT 0`)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = e.pool.Exec(context.Background(), `DROP ROLE `+role) })
		db := e.poolWith(role, nil)
		_, err = store.QueueGet(e.ctx, db, q.Name)
		require.ErrorIs(t, err, store.ErrUnavailable)
	})
	// Unaffected: the dead letters are all still there.
	require.EqualValues(t, 400, e.deadLetters(q))
}
