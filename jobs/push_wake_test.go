package jobs_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgtest"
	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/store"
)

// A redrive into a push target that no worker delivers starts its
// delivery at once: the store's wake (Notifier.Claimable) kicks this
// instance's Pusher. The Notifier never listens here, so no NOTIFY is
// heard, and the next sweep is a minute away: only the kick explains a
// prompt delivery.
func TestPushRedriveKicksPusher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	marker, markerRC := pushTarget(t, pool, "marker")
	q, rc := pushTarget(t, pool, "redriven")
	send(t, pool, marker.Name, 1)
	send(t, pool, q.Name, 1)
	// q's message is dead-lettered before the Pusher starts.
	msgs, _, err := store.MessageClaim(ctx, pool, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	_, dead, err := store.MessageNack(ctx, pool, store.NackParams{Queue: q, Receipts: []store.Receipt{msgs[0].Receipt}, DeadLetter: true})
	require.NoError(t, err)
	require.Equal(t, 1, dead)

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	notifier := store.NewNotifier(pool, 0, log) // not run: it hears nothing
	stop := make(chan struct{})
	p := jobs.NewPusher(pool, jobs.PushConfig{
		Notifier: notifier, Client: jobs.NewPushClient(true), Log: log, Stop: stop,
		// The marker's worker stays, so no sweep follows its leaving.
		IdleFor: time.Hour, SweepEvery: time.Minute,
	})
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(runCtx) })
	t.Cleanup(func() { close(stop); cancel(); wg.Wait() })
	// Only the first sweep starts the marker: once it is delivered, that
	// sweep is over, and it saw no message of q.
	require.Eventually(t, func() bool { return len(markerRC.list()) > 0 }, 20*time.Second, 10*time.Millisecond)
	require.Empty(t, rc.list())

	redriven := time.Now()
	n, err := store.DeadLetterRedriveAndWake(ctx, pool, notifier, store.RedriveParams{QueueID: q.ID, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Eventually(t, func() bool { return len(rc.list()) > 0 }, 10*time.Second, 10*time.Millisecond,
		"the redriven message is pushed before the next sweep")
	require.Less(t, rc.list()[0].Sub(redriven), 5*time.Second)
}
