package store

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgtest"
)

// A wake recorded by a transaction that was still running when a read
// began is read by the next read, however long the transaction took to
// commit: reads start from the previous read's snapshot xmin, not from a
// clock (a commit stamped 300 ms before it became visible was missed).
func TestSQLWakesReadAfterASlowCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The wake is written now, long before the commit, as a caller that
	// ran SET CONSTRAINTS ALL IMMEDIATE has it.
	_, err = tx.Exec(ctx, `SELECT ferry.wake_at_commit(42)`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
	require.NoError(t, err)

	keys, from, err := sqlWakesSince(ctx, pool, 0)
	require.NoError(t, err)
	require.NotContains(t, keys, int64(42), "not committed yet")
	require.NoError(t, tx.Commit(ctx))

	keys, _, err = sqlWakesSince(ctx, pool, from)
	require.NoError(t, err)
	require.Contains(t, keys, int64(42), "committed after the first read began: read by the next")
}
