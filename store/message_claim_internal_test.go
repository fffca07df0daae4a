package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// TestClaimGaveUp holds the claim's retry budget: a claim that met rows
// moved under it stops only when it has run claimAttempts times and for
// claimPatience both, so neither a burst of fast failures nor one slow
// attempt ends it early.
func TestClaimGaveUp(t *testing.T) {
	t.Parallel()
	require.False(t, claimGaveUp(1, 0))
	require.False(t, claimGaveUp(claimAttempts-1, time.Hour), "one run short of the attempts")
	require.False(t, claimGaveUp(claimAttempts, claimPatience-time.Millisecond), "ten fast runs: not yet")
	require.False(t, claimGaveUp(100, time.Second), "many fast runs: not yet")
	require.True(t, claimGaveUp(claimAttempts, claimPatience))
	require.True(t, claimGaveUp(claimAttempts+5, time.Minute))
}

// TestBusyCauses: the claim's retry tells the causes of ErrBusy apart.
// Rows moved under a statement (40001) and a deadlock (40P01) are worth
// running it again (errBusyRunAgain); a lock_timeout (55P03) is not. All
// three are ErrBusy, with the same text, for callers.
func TestBusyCauses(t *testing.T) {
	t.Parallel()
	for code, again := range map[string]bool{"40001": true, "40P01": true, "55P03": false} {
		err := interpretError("message claim", fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code}))
		require.ErrorIs(t, err, ErrBusy, code)
		require.Equal(t, again, errors.Is(err, errBusyRunAgain), code)
		require.EqualError(t, err, "message claim: resource busy", code)
	}
}

// TestClaimLockTimeoutAnswersAtOnce: a claim whose session's lock_timeout
// expired while another transaction held a lock it needs (55P03) answers
// ErrBusy after that one wait, as it did before the claim retried: the
// retry's claimAttempts runs over claimPatience are for rows moved under
// the claim (40001), and would keep a busy answer (503, Retry-After) from
// the client for seconds of waits like the first.
func TestClaimLockTimeoutAnswersAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	require.NoError(t, err)
	// The claim sets no lock_timeout of its own: the session's applies.
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "50ms"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	q, _, err := QueueUpsert(ctx, pool, "busy", QueuePatch{})
	require.NoError(t, err)

	// Another transaction holds ferry.messages (LOCK TABLE takes every
	// partition too) until the test ends.
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Rollback(ctx) })
	_, err = holder.Exec(ctx, `LOCK TABLE ferry.messages IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	start := time.Now()
	_, _, err = MessageClaim(ctx, pool, ClaimParams{Queue: q, Max: 10, VisibilityTimeout: time.Minute})
	took := time.Since(start)
	require.ErrorIs(t, err, ErrBusy)
	require.NotErrorIs(t, err, errBusyRunAgain)
	require.Less(t, took, claimPatience/2, "the claim ran again after its lock_timeout")
}
