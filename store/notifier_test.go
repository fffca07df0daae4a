package store_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// runNotifier starts a Notifier and stops it at cleanup.
func (e *env) runNotifier(pool *pgxpool.Pool) *store.Notifier {
	n := store.NewNotifier(pool, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return n
}

// activityEventually waits until appName has sessions whose last statement
// matches the LIKE pattern and that are idle now (at least want of them).
func (e *env) activityEventually(appName, pattern string, want int) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		var n int
		err := e.pool.QueryRow(e.ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND query LIKE $2 AND state = 'idle'`,
			appName, pattern).Scan(&n)
		return err == nil && n >= want
	}, 10*time.Second, 5*time.Millisecond, "no idle %s session ran %q", appName, pattern)
}

type received struct {
	msgs    []store.Message
	err     error
	elapsed time.Duration
}

// requireSendWakes sends one message to q and requires that the receive
// waiting on out returns just that message, within 2 seconds of the send.
func requireSendWakes(t *testing.T, e *env, sender *store.Sender, q store.Queue, out <-chan received, msgAndArgs ...any) {
	t.Helper()
	sentAt := time.Now()
	res, _, err := sender.Send(e.ctx, q.Name, []store.SendMessage{msg(1)})
	require.NoError(t, err)
	r := <-out
	require.NoError(t, r.err)
	require.Equal(t, []int64{res[0].ID}, ids(r.msgs))
	require.Less(t, time.Since(sentAt), 2*time.Second, msgAndArgs...)
}

// receiveAsync starts a MessageReceive and returns where its outcome will
// arrive.
func receiveAsync(ctx context.Context, db store.DBTX, n *store.Notifier, p store.ReceiveParams) <-chan received {
	return inBackground(func(start time.Time) received {
		msgs, _, err := store.MessageReceive(ctx, db, n, p)
		return received{msgs, err, time.Since(start)}
	})
}

// TestNotifierListenerReconnectsPromptly: each time its LISTEN connection
// is cut (here by pg_terminate_backend; in production by a restart or a
// failover of the database), the Notifier is listening again within about
// a second, however often it happened before: the backoff starts afresh
// after every connection that worked.
func TestNotifierListenerReconnectsPromptly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runNotifier(e.newNamedPool(2, "relisten"))
	listener := func() (pid int) {
		err := e.pool.QueryRow(e.ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'relisten'
				AND query = 'LISTEN ferry_messages'`).Scan(&pid)
		if err != nil {
			return 0
		}
		return pid
	}
	for i := range 7 {
		var pid int
		require.Eventually(t, func() bool { pid = listener(); return pid != 0 }, 10*time.Second, 5*time.Millisecond)
		cut := time.Now()
		_, err := e.pool.Exec(e.ctx, `SELECT pg_terminate_backend($1, 5000)`, pid)
		require.NoError(t, err)
		require.Eventually(t, func() bool { p := listener(); return p != 0 && p != pid }, 10*time.Second, 5*time.Millisecond)
		took := time.Since(cut)
		require.Less(t, took, 1500*time.Millisecond, "cut %d: listening again after %s", i+1, took)
	}
}
