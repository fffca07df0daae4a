package push_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/push"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/store"
)

// foreignOwner is another instance's lease owner id.
const foreignOwner = "00000000-0000-4000-8000-0000000000ff"

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

// pushTarget makes a push queue (max_in_flight 1) to a fast receiver.
func pushTarget(t *testing.T, pool *pgxpool.Pool, name string) (store.Queue, *arrivals) {
	t.Helper()
	return pushTargetServing(t, pool, name, time.Millisecond)
}

// pushTargetServing makes a push queue (max_in_flight 1) to a receiver
// that answers each request after delay.
func pushTargetServing(t *testing.T, pool *pgxpool.Pool, name string, delay time.Duration) (store.Queue, *arrivals) {
	t.Helper()
	rc := &arrivals{}
	srv := httptest.NewServer(rc.serve(delay))
	t.Cleanup(srv.Close)
	one := 1
	q, _, err := store.QueueUpsert(context.Background(), pool, name, store.QueuePatch{Push: &store.PushPatch{
		URL: &srv.URL, MaxInFlight: &one, NewSecret: push.NewSigningSecret(),
	}})
	require.NoError(t, err)
	return q, rc
}

// pushBacklog makes a new database with push queue name (see pushTarget)
// holding three messages.
func pushBacklog(t *testing.T, name string) (*pgxpool.Pool, store.Queue, *arrivals) {
	t.Helper()
	pool := pgtest.NewPool(t)
	q, rc := pushTarget(t, pool, name)
	send(t, pool, q.Name, 3)
	return pool, q, rc
}

// runPusher starts a Pusher (and its Notifier) with cfg, stopped at the
// test's end.
func runPusher(t *testing.T, pool *pgxpool.Pool, cfg push.Config) *push.Pusher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cfg.Notifier = store.NewNotifier(pool, 0, cfg.Log)
	cfg.Client = push.NewClient(true)
	stop := make(chan struct{})
	cfg.Stop = stop
	p := push.New(pool, cfg)
	var wg sync.WaitGroup
	wg.Go(func() { cfg.Notifier.Run(ctx) })
	wg.Go(func() { p.Run(ctx) })
	t.Cleanup(func() { close(stop); cancel(); wg.Wait() })
	return p
}

// pushSetup makes a push queue with a backlog of n messages to a slow
// receiver and a running Pusher with cfg (Notifier, Client, Stop and Log
// filled in).
func pushSetup(t *testing.T, n int, cfg push.Config) (*pgxpool.Pool, store.Queue, *arrivals) {
	t.Helper()
	pool := pgtest.NewPool(t)
	q, rc := pushTargetServing(t, pool, "hooks", 50*time.Millisecond)
	send(t, pool, "hooks", n)
	runPusher(t, pool, cfg)
	return pool, q, rc
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
	runPusher(t, pool, push.Config{Workers: 1, RunFor: 300 * time.Millisecond})

	require.Eventually(t, func() bool { return len(rcs["one"].list()) > 0 && len(rcs["two"].list()) > 0 },
		20*time.Second, 10*time.Millisecond, "both targets delivered")
	n1, n2 := len(rcs["one"].list()), len(rcs["two"].list())
	t.Logf("when both had deliveries: %d and %d of 600", n1, n2)
	require.Less(t, max(n1, n2), 600, "the second started before the first was drained")
}

// A kick for a target whose lease another instance holds is acted on when
// that lease ends, not at the next fallback sweep: the other instance may
// have died (issue 9: takeover within seconds). Here the only sweep ran
// before the target had messages, so nothing but the kick knows of them.
func TestPushHeldKickActsAtLeaseEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	marker, markerRC := pushTarget(t, pool, "marker")
	q, rc := pushTarget(t, pool, "held")
	send(t, pool, marker.Name, 1)
	// IdleFor: the marker's worker stays, so no sweep follows its leaving.
	p := runPusher(t, pool, push.Config{IdleFor: time.Hour, SweepEvery: time.Minute})
	// Only a sweep starts the marker (its send preceded the Pusher): once
	// it is delivered, the first sweep is over and saw no message of q.
	require.Eventually(t, func() bool { return len(markerRC.list()) > 0 }, 20*time.Second, 10*time.Millisecond)

	_, err := pool.Exec(ctx, `INSERT INTO ferry.push_leases (queue_id, owner, expires_at)
		VALUES ($1, $2, now() + interval '3 seconds')`, q.ID, foreignOwner)
	require.NoError(t, err)
	sent := time.Now()
	send(t, pool, q.Name, 5)
	p.Kick(ctx, []int64{q.ID}) // as the NOTIFY of the send is heard: the acquire finds the lease held
	require.Eventually(t, func() bool { return len(rc.list()) > 0 }, 10*time.Second, 10*time.Millisecond,
		"delivered once the other instance's lease ended")
	took := rc.list()[0].Sub(sent)
	t.Logf("first delivery %s after the send (the lease ended 3 s after it)", took.Round(time.Millisecond))
	require.Less(t, took, 5*time.Second)
}

// An acquire that loses a race with the other owner's renewal (the lease
// looked expired, then was renewed before the acquire could take it)
// reports the target neither acquired nor held; the Pusher looks again at
// once instead of dropping the target until the fallback sweep.
func TestPushAcquireRacingRenewalIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q, rc := pushBacklog(t, "raced")
	_, err := pool.Exec(ctx, `INSERT INTO ferry.push_leases (queue_id, owner, expires_at)
		VALUES ($1, $2, now() - interval '1 second')`, q.ID, foreignOwner)
	require.NoError(t, err)
	// The other owner's renewal, not committed yet: the Pusher's sweep
	// sees the lease expired, its acquire waits for this lock.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `UPDATE ferry.push_leases SET expires_at = clock_timestamp() + interval '4 seconds' WHERE queue_id = $1`, q.ID)
	require.NoError(t, err)

	runPusher(t, pool, push.Config{SweepEvery: time.Minute})
	require.Eventually(t, func() bool {
		return count(t, pool, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%ferry:push_lease_acquire%'`) > 0
	}, 20*time.Second, 10*time.Millisecond, "the acquire waits for the renewal")
	require.NoError(t, tx.Commit(ctx))
	renewed := time.Now()
	require.Eventually(t, func() bool { return len(rc.list()) > 0 }, 15*time.Second, 10*time.Millisecond,
		"delivered once the renewed lease ended")
	took := rc.list()[0].Sub(renewed)
	t.Logf("first delivery %s after the renewal (the lease ended < 4 s after it)", took.Round(time.Millisecond))
	require.Less(t, took, 6*time.Second)
}

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// While lease acquires keep failing (a read-only database during a
// failover, here a trigger), the Pusher backs off and warns once, instead
// of an acquire, a sweep and a warning every 100 ms.
func TestPushAcquireFailuresBackOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := pushBacklog(t, "failing")
	_, err := pool.Exec(ctx, `
		CREATE SEQUENCE acquire_attempts;
		CREATE FUNCTION refuse_lease() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM nextval('acquire_attempts');
			RAISE EXCEPTION 'cannot execute INSERT in a read-only transaction' USING ERRCODE = '25006';
		END $$;
		CREATE TRIGGER refuse_lease BEFORE INSERT ON ferry.push_leases FOR EACH ROW EXECUTE FUNCTION refuse_lease();`)
	require.NoError(t, err)
	attempts := func() int {
		return count(t, pool, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM acquire_attempts`)
	}
	logs := &lockedBuffer{}
	runPusher(t, pool, push.Config{Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.Eventually(t, func() bool { return attempts() > 0 }, 20*time.Second, 10*time.Millisecond, "the first acquire")
	time.Sleep(3 * time.Second) // the thing measured: how often it tries meanwhile
	n := attempts()
	warns := strings.Count(logs.String(), `msg="push lease acquire failed`)
	t.Logf("%d acquires and %d warnings in about 3 s", n, warns)
	require.LessOrEqual(t, n, 8, "acquires back off")
	require.GreaterOrEqual(t, n, 3, "and still try")
	require.Equal(t, 1, warns, "one warning per streak:\n%s", logs)
}

// A redrive into a push target that no worker delivers starts its
// delivery at once: the store's wake (Notifier.Claimable) kicks this
// instance's Pusher. The Notifier never listens here, so no NOTIFY is
// heard, and the next sweep is a minute away: only the kick explains a
// prompt delivery.
func TestPushRedriveKicksPusher(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	q, rc := pushTarget(t, pool, "redriven")
	ctx := context.Background()
	// q's message is dead-lettered before the Pusher starts.
	send(t, pool, q.Name, 1)
	msgs, _, err := store.MessageClaim(ctx, pool, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	_, dead, err := store.MessageNack(ctx, pool, store.NackParams{Queue: q, Receipts: []store.Receipt{msgs[0].Receipt}, DeadLetter: true})
	require.NoError(t, err)
	require.Equal(t, 1, dead)
	marker, markerRC := pushTarget(t, pool, "marker")
	send(t, pool, marker.Name, 1)

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	notifier := store.NewNotifier(pool, 0, log) // not run: it hears nothing
	stop := make(chan struct{})
	p := push.New(pool, push.Config{
		Notifier: notifier, Client: push.NewClient(true), Log: log, Stop: stop,
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
