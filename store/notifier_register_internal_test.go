package store

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// TestNotifierUnregistersIdleKeys: a key is registered once (a second
// register of it is no fresh registration); tidying deletes the row of a
// key no poll holds and none used since, and keeps a held one; a stopping
// Notifier deletes its rows, its listener's included.
func TestNotifierUnregistersIdleKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	n := NewNotifier(pool, 0, slog.New(slog.DiscardHandler))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, n.Listening, 10*time.Second, time.Millisecond)
	rows := func() (keys []int64) {
		r, err := pool.Query(ctx, `SELECT key FROM ferry.wake_waiters ORDER BY key`)
		require.NoError(t, err)
		for r.Next() {
			var k int64
			require.NoError(t, r.Scan(&k))
			keys = append(keys, k)
		}
		require.NoError(t, r.Err())
		return keys
	}

	release := n.hold(101)
	require.True(t, n.register(ctx, 101))
	require.False(t, n.register(ctx, 101), "registered already")
	n.hold(102)()
	require.True(t, n.register(ctx, 102))
	require.Equal(t, []int64{listenerKey, 101, 102}, rows())

	require.NoError(t, n.tidyOnce(ctx, time.Now().Add(-time.Hour)))
	require.Equal(t, []int64{listenerKey, 101, 102}, rows(), "both were used within the hour")
	require.NoError(t, n.tidyOnce(ctx, time.Now().Add(time.Hour)))
	require.Equal(t, []int64{listenerKey, 101}, rows(), "102 is idle, 101 held")
	release()
	require.NoError(t, n.tidyOnce(ctx, time.Now().Add(time.Hour)))
	require.Equal(t, []int64{listenerKey}, rows())
	require.True(t, n.register(ctx, 102), "registered again after it was deleted")

	cancel()
	<-done
	require.Empty(t, rows(), "a stopped Notifier leaves no rows")
}
