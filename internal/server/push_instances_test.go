package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

func allowPrivatePush(c *server.Config) { c.AllowPrivatePush = true }

// Sends through two instances kick push on both: only the instance that
// holds the target's lease delivers it, so a max_in_flight of 1 holds
// across them (the other's kicks start no second deliverer).
func TestPushKicksOnTwoInstancesOneDeliverer(t *testing.T) {
	t.Parallel()
	a := ferrytest.Start(t, allowPrivatePush)
	b := ferrytest.StartOn(t, a.DatabaseURL, allowPrivatePush)
	rc := newTakeoverReceiver(t, 10*time.Millisecond)
	require.Equal(t, http.StatusCreated, a.Do("PUT", "/v1/queues/jobs", map[string]any{
		"push": map[string]any{"url": rc.url("/q"), "max_in_flight": 1},
	}).Status)

	var ids []string
	for i := range 40 {
		env := []*ferrytest.Env{a, b}[i%2]
		ids = append(ids, sendMessages(t, env, "jobs", []map[string]any{{"body": i}})[0])
		if i%4 == 3 {
			time.Sleep(15 * time.Millisecond) // let kicks land while a delivery is in flight
		}
	}
	waitFor(t, 30*time.Second, "the queue drained", func() bool { return drained(t, b, "/v1/queues/jobs") })
	rc.requireDelivered(t, "/q", ids)
	require.Equal(t, 1, rc.peakOf("/q"), "one request at a time across both instances")
}

// Idle means quiet (issue 9 item 2), push's share: a server with push
// targets and no traffic inserts no job rows for push and writes no
// lease; the whole server's figures over the window are logged. Not
// parallel: the cluster-wide figures (WAL, transaction ids) must be this
// test's alone.
func TestPushQuietWhenIdle(t *testing.T) {
	env := ferrytest.Start(t, allowPrivatePush)
	rc := newTakeoverReceiver(t, 0)
	require.Equal(t, http.StatusCreated, env.Do("PUT", "/v1/queues/jobs", map[string]any{
		"push": map[string]any{"url": rc.url("/q")},
	}).Status)
	require.Equal(t, http.StatusCreated, env.Do("PUT", "/v1/topics/t", nil).Status)
	require.Equal(t, http.StatusCreated, env.Do("PUT", "/v1/topics/t/subscriptions/s", map[string]any{
		"push": map[string]any{"url": rc.url("/s")},
	}).Status)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// The PUTs' kicks start workers that find nothing and leave.
	leases := func() int {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM ferry.push_leases`).Scan(&n))
		return n
	}
	waitFor(t, 30*time.Second, "a worker for each target the PUTs kicked", func() bool { return leases() == 2 })
	waitFor(t, 30*time.Second, "the workers to leave", func() bool { return leases() == 0 })

	read := func() (wal, xid int64) {
		require.NoError(t, conn.QueryRow(ctx, `
			SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
				pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&wal, &xid))
		return wal, xid
	}
	// Throughout the window no worker starts: a worker holds its lease
	// for at least IdleFor (seconds), so a sample every 100 ms sees it.
	const window = 10 * time.Second
	wal0, xid0 := read()
	for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		var leases, pushJobs int
		require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM ferry.push_leases),
			(SELECT count(*) FROM river_job WHERE kind LIKE 'ferry_push%')`).Scan(&leases, &pushJobs))
		require.Zero(t, leases, "no push worker starts while idle")
		require.Zero(t, pushJobs, "no job rows for push")
	}
	wal1, xid1 := read()
	t.Logf("whole server, %s idle: %d bytes of WAL, %d write transactions (transaction ids taken)",
		window, wal1-wal0, xid1-xid0)
}

// A graceful stop releases the stopping instance's leases and announces
// it: another instance takes the targets over at once, not when the
// leases would have ended.
func TestPushGracefulStopHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	a := ferrytest.Start(t, allowPrivatePush)
	rc := newTakeoverReceiver(t, 20*time.Millisecond)
	require.Equal(t, http.StatusCreated, a.Do("PUT", "/v1/queues/jobs", map[string]any{
		"push": map[string]any{"url": rc.url("/q"), "max_in_flight": 1},
	}).Status)
	ids := sendBacklog(t, a, 200)
	waitFor(t, 30*time.Second, "A delivering", func() bool { return rc.count("/q") >= 5 })
	b := ferrytest.StartOn(t, a.DatabaseURL, allowPrivatePush)
	waitFor(t, 30*time.Second, "B up while A delivers", func() bool { return rc.count("/q") >= 20 })
	a.Stop()
	stopped := time.Now()
	waitFor(t, 10*time.Second, "B delivering", func() bool { return rc.firstAfter("/q", stopped) != nil })
	took := rc.firstAfter("/q", stopped).Sub(stopped)
	t.Logf("B delivers %s after A's graceful stop returned", took.Round(time.Millisecond))
	require.Less(t, took, time.Second, "handed over at once, not after the lease's TTL")
	waitFor(t, 60*time.Second, "the queue drained", func() bool { return drained(t, b, "/v1/queues/jobs") })
	rc.requireDelivered(t, "/q", ids)
	require.Equal(t, 1, rc.peakOf("/q"))
}
