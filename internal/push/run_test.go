package push_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/push"
)

// A worker whose lease was taken over stops claiming at once: its next
// claim finds the lease gone (the claim is fenced by the lease row), and
// no request starts after the request in flight.
func TestPushLeaseLostStopsClaims(t *testing.T) {
	t.Parallel()
	pool, q, rc := pushSetup(t, 200, push.Config{})
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
	pool, q, rc := pushSetup(t, 500, push.Config{LeaseTTL: 3 * time.Second, Heartbeat: time.Hour, IdleFor: time.Hour})
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
