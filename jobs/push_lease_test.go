package jobs_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgtest"
	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/store"
)

// arrivals is a slow receiver that records when each request arrived.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) serve(delay time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.at = append(a.at, time.Now())
		a.mu.Unlock()
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func (a *arrivals) list() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at...)
}

// pushSetup makes a push queue with a backlog of n messages to a slow
// receiver and a running Pusher with cfg (Notifier, Client, Stop and Log
// filled in).
func pushSetup(t *testing.T, n int, cfg jobs.PushConfig) (*pgxpool.Pool, store.Queue, *arrivals) {
	t.Helper()
	pool := pgtest.NewPool(t)
	q, rc := pushTargetServing(t, pool, "hooks", 50*time.Millisecond)
	send(t, pool, "hooks", n)
	runPusher(t, pool, cfg)
	return pool, q, rc
}

// A worker whose lease was taken over stops claiming at once: its next
// claim finds the lease gone (the claim is fenced by the lease row), and
// no request starts after the request in flight.
func TestPushLeaseLostStopsClaims(t *testing.T) {
	t.Parallel()
	pool, q, rc := pushSetup(t, 200, jobs.PushConfig{})
	ctx := context.Background()
	require.Eventually(t, func() bool { return len(rc.list()) >= 5 }, 20*time.Second, 10*time.Millisecond)
	_, err := pool.Exec(ctx, `UPDATE ferry.push_leases SET owner = '00000000-0000-4000-8000-0000000000ff', expires_at = now() + interval '1 minute'
		WHERE queue_id = $1`, q.ID)
	require.NoError(t, err)
	takenOver := time.Now()
	n := len(rc.list())
	time.Sleep(2 * time.Second) // the thing measured: that nothing more comes
	after := rc.list()[n:]
	// The one request in flight at the takeover may be followed by none.
	require.LessOrEqual(t, len(after), 1, "requests after the takeover: %v", after)
	for _, at := range after {
		require.Less(t, at.Sub(takenOver), 100*time.Millisecond, "a request started well after the takeover")
	}
}

// Self-fencing: a worker that cannot renew its lease stops claiming
// before the lease ends (by LeaseTTL - 1 s after the acquire was sent),
// so no other instance that takes the lease over at its end ever
// delivers beside it. (Heartbeats are turned off here: an hour apart.)
func TestPushWorkerFencesItselfBeforeLeaseEnds(t *testing.T) {
	t.Parallel()
	pool, q, rc := pushSetup(t, 500, jobs.PushConfig{LeaseTTL: 3 * time.Second, Heartbeat: time.Hour, IdleFor: time.Hour})
	ctx := context.Background()
	var expires time.Time
	require.Eventually(t, func() bool {
		err := pool.QueryRow(ctx, `SELECT expires_at FROM ferry.push_leases WHERE queue_id = $1`, q.ID).Scan(&expires)
		return err == nil
	}, 20*time.Second, 10*time.Millisecond, "the lease")
	require.Eventually(t, func() bool { return time.Now().After(expires.Add(200 * time.Millisecond)) }, 10*time.Second, 10*time.Millisecond)
	var first, last time.Time
	for _, at := range rc.list() {
		if !at.Before(expires) {
			continue
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	require.False(t, last.IsZero(), "delivered while the lease held")
	t.Logf("lease ends %s after the first delivery; the last request started %s before it",
		expires.Sub(first).Round(time.Millisecond), expires.Sub(last).Round(time.Millisecond))
	require.Greater(t, expires.Sub(last), 800*time.Millisecond, "claims stop a margin before the lease ends")
}

// With fewer workers than busy targets, a worker past its run budget
// yields to a waiting target: both targets are delivered, taking turns,
// instead of one only after the other's backlog is gone.
func TestPushWorkersTakeTurns(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	rcs := map[string]*arrivals{}
	for _, name := range []string{"one", "two"} {
		_, rcs[name] = pushTargetServing(t, pool, name, 5*time.Millisecond)
		send(t, pool, name, 600)
	}
	runPusher(t, pool, jobs.PushConfig{Workers: 1, RunFor: 300 * time.Millisecond})

	require.Eventually(t, func() bool { return len(rcs["one"].list()) > 0 && len(rcs["two"].list()) > 0 },
		20*time.Second, 10*time.Millisecond, "both targets delivered")
	n1, n2 := len(rcs["one"].list()), len(rcs["two"].list())
	t.Logf("when both had deliveries: %d and %d of 600", n1, n2)
	require.Less(t, max(n1, n2), 600, "the second started before the first was drained")
}
