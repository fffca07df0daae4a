package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// TestInterpretLimits: errors PostgreSQL raises at its own limits become
// ErrUnavailable (503 + Retry-After), a lock_timeout ErrBusy, and the
// transaction counts as rolled back. (TestDatabaseLimitsAreRetryable meets
// the ones a test can cause safely for real; exhausting the lock table, as
// TestRedriveManyGroupsConcurrently did before redrives were batched,
// would disturb the other tests sharing the server.) A merged batch that
// met one is written again request by request: the cause may be one
// request's own.
func TestInterpretLimits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code, message string
		want          error
	}{
		{"53200", "out of shared memory", ErrUnavailable},
		{"53200", "out of memory", ErrUnavailable},
		{"53300", "sorry, too many clients already", ErrUnavailable},
		{"53400", "configuration limit exceeded", ErrUnavailable},
		{"53100", "could not extend file: No space left on device", ErrUnavailable},
		{"57014", "canceling statement due to statement timeout", ErrUnavailable},
		{"55P03", "canceling statement due to lock timeout", ErrBusy},
		{"57014", "canceling statement due to user request", nil},
	} {
		pgErr := &pgconn.PgError{Code: c.code, Message: c.message}
		err := interpretError("op", fmt.Errorf("wrapped: %w", pgErr))
		if c.want != nil {
			require.ErrorIs(t, err, c.want, "%s %s", c.code, c.message)
		} else {
			require.False(t, errors.Is(err, ErrUnavailable) || errors.Is(err, ErrBusy), "%s %s: %v", c.code, c.message, err)
		}
		require.True(t, retryEachAlone(err), "%s: retried request by request", c.code)
	}
}

// TestInterpretConnectionLost: what a failover shows a store function (no
// server, a standby, a connection cut by the server, one already closed)
// is ErrUnavailable (503 + Retry-After), never an unknown error (500).
// Each error is a real one from pgx or PostgreSQL. None makes a merged
// batch be written again request by request: whether or not the
// transaction may have committed, every retry would meet the same outage.
func TestInterpretConnectionLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	check := func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err)
		got := interpretError("op", err)
		require.ErrorIs(t, got, ErrUnavailable, "%v", err)
		require.True(t, IsUnavailable(err), "raw: %v", err)
		require.False(t, retryEachAlone(got), "split: %v", err)
		require.False(t, retryEachAlone(err), "split (raw): %v", err)
	}

	t.Run("NoServer", func(t *testing.T) {
		cfg := pool.Config().ConnConfig.Copy()
		cfg.Port = 1 // nothing listens there
		_, err := pgx.ConnectConfig(ctx, cfg)
		check(t, err)
	})
	t.Run("ReadOnly", func(t *testing.T) {
		// 25006, as on a standby that is not promoted yet.
		_, err := pool.Exec(ctx, `SET LOCAL transaction_read_only = on; CREATE TEMP TABLE ro ()`)
		check(t, err)
	})
	t.Run("TerminatedThenClosed", func(t *testing.T) {
		conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, conn.PgConn().PID())
		require.NoError(t, err)
		// 57P01 (or EOF, if the socket closes first).
		_, err = conn.Exec(ctx, `SELECT 1`)
		check(t, err)
		// The connection is closed now.
		_, err = conn.Exec(ctx, `SELECT 1`)
		require.ErrorIs(t, err, pgconn.ErrConnClosed)
		check(t, err)
	})
	t.Run("NotTheDatabase", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := pool.Exec(cctx, `SELECT 1`)
		require.NotErrorIs(t, interpretError("op", err), ErrUnavailable, "a caller's cancelled context")
		_, err = pool.Exec(ctx, `SELECT * FROM no_such_table`)
		require.NotErrorIs(t, interpretError("op", err), ErrUnavailable, "an error in the statement")
	})
}
