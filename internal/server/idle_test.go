package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// Idle bounds of DESIGN.md invariant 12 (issue 9, item 2): with no
// traffic, a whole Ferry commits at most this many transactions and
// writes at most this much WAL a minute. The bound on commits was 60
// before the message ring (issue 21): its rotator truncates, in the
// minute after traffic, the slots the traffic left (a transaction each),
// then reads with a back-off to once a minute; 45 to 63 were measured.
const (
	idleMaxCommits  = 70
	idleMaxWALBytes = 128 << 10
)

// DESIGN.md invariant 12: an idle Ferry is quiet. A server with queues,
// topics, subscriptions and a consumer group but no traffic idles for a
// full minute after its start-up work; the transactions committed in its
// database and the WAL written by the whole cluster (which hosts nothing
// else) in that minute stay within the bounds. The statements that ran
// are logged from pg_stat_statements, so a failure says who is noisy.
func TestIdleServerIsQuiet(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("idles for a minute")
	}
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{
		DataDir: filepath.Join(t.TempDir(), "pg"),
		Settings: map[string]string{
			"shared_preload_libraries": "pg_stat_statements",
			"pg_stat_statements.track": "top",
			// WAL as in production: a page's first change after a
			// checkpoint writes the whole page.
			"full_page_writes": "on",
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	for _, q := range []string{"CREATE DATABASE ferry", "CREATE EXTENSION pg_stat_statements"} {
		_, err = admin.Exec(ctx, q)
		require.NoError(t, err)
	}

	env := ferrytest.StartOn(t, c.URL("ferry"), func(cfg *server.Config) { cfg.AllowPrivatePush = true })
	idleSetup(t, env)
	idleWarmUp(t, env)

	before := idleSnapshot(t, admin)
	_, err = admin.Exec(ctx, "SELECT pg_stat_statements_reset()")
	require.NoError(t, err)
	time.Sleep(time.Minute) // the idle minute is what is measured
	after := idleSnapshot(t, admin)
	commits := after.commits - before.commits
	wal := after.lsn - before.lsn
	t.Logf("idle minute: %d transactions committed, %d bytes of WAL (bounds %d, %d)", commits, wal, idleMaxCommits, idleMaxWALBytes)
	idleLogStatements(t, admin)
	require.LessOrEqual(t, commits, int64(idleMaxCommits), "transactions committed in an idle minute")
	require.LessOrEqual(t, wal, int64(idleMaxWALBytes), "WAL bytes written in an idle minute")
}

// idleSetup creates what an ordinary deployment has: queues (one with
// groups in use), topics, pull subscriptions and a consumer group with a
// member, with a little traffic that is over before the measurement.
func idleSetup(t *testing.T, env *ferrytest.Env) {
	for _, q := range []string{"orders", "emails", "reports"} {
		require.Equal(t, http.StatusCreated, env.Do("PUT", "/v1/queues/"+q, nil).Status)
	}
	r := env.Do("POST", "/v1/queues/orders/messages", map[string]any{"messages": []map[string]any{
		{"body": 1, "group": "g", "dedup_id": "d1"}, {"body": 2},
	}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var got struct {
		Messages []struct{ Receipt string } `json:"messages"`
	}
	env.Do("POST", "/v1/queues/orders/receive", map[string]any{"max_messages": 10}).JSON(t, &got)
	require.Len(t, got.Messages, 2)
	receipts := []string{got.Messages[0].Receipt, got.Messages[1].Receipt}
	require.Equal(t, http.StatusOK, env.Do("POST", "/v1/queues/orders/ack", map[string]any{"receipts": receipts}).Status)

	for _, tp := range []string{"clicks", "audit"} {
		require.Equal(t, http.StatusCreated, env.Do("PUT", "/v1/topics/"+tp, map[string]any{"partitions": 2}).Status)
		require.Equal(t, http.StatusCreated, env.Do("PUT", "/v1/topics/"+tp+"/subscriptions/all", nil).Status)
	}
	r = env.Do("POST", "/v1/topics/clicks/events", map[string]any{"events": []map[string]any{{"type": "click", "key": "k"}}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r = env.Do("POST", "/v1/topics/clicks/groups/stats/poll", map[string]any{"consumer": "w1", "start": "earliest"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	// Push targets, a queue and a subscription, each delivered once before
	// the idle minute: an idle Pusher must be quiet too.
	var delivered atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	push := map[string]any{"push": map[string]any{"url": hook.URL}}
	for _, path := range []string{"/v1/queues/hooks", "/v1/topics/audit/subscriptions/hook"} {
		r := env.Do("PUT", path, push)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	r = env.Do("POST", "/v1/queues/hooks/messages", map[string]any{"messages": []map[string]any{{"body": 1}}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r = env.Do("POST", "/v1/topics/audit/events", map[string]any{"events": []map[string]any{{"type": "audit"}}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	require.Eventually(t, func() bool { return delivered.Load() == 2 }, 30*time.Second, 20*time.Millisecond)
}

// idleWarmUp waits for the start-up work to be over: River has a leader
// and every periodic job's run at start has completed.
func idleWarmUp(t *testing.T, env *ferrytest.Env) {
	require.Eventually(t, func() bool {
		var leaders, pending int
		err := env.Server.Pool().QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM river_leader),
			(SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'discarded', 'cancelled'))`).Scan(&leaders, &pending)
		return err == nil && leaders == 1 && pending == 0
	}, 30*time.Second, 100*time.Millisecond, "River elects a leader and finishes its start-up jobs")
	// Counters are flushed by idle backends within 10 s (PGSTAT_IDLE_INTERVAL):
	// the snapshots below are taken in the same steady state.
	time.Sleep(11 * time.Second)
}

type idleFigures struct{ commits, lsn int64 }

// idleSnapshot reads the committed transactions of the ferry database and
// the cluster's WAL position, from another database so that reading them
// counts nothing.
func idleSnapshot(t *testing.T, admin *pgx.Conn) idleFigures {
	var f idleFigures
	require.NoError(t, admin.QueryRow(context.Background(), `SELECT
		(SELECT xact_commit FROM pg_stat_database WHERE datname = 'ferry'),
		pg_current_wal_lsn() - '0/0'`).Scan(&f.commits, &f.lsn))
	return f
}

// idleLogStatements logs what ran in the ferry database during the idle
// minute.
func idleLogStatements(t *testing.T, admin *pgx.Conn) {
	rows, err := admin.Query(context.Background(), `
		SELECT s.calls, s.wal_bytes, regexp_replace(left(s.query, 160), '\s+', ' ', 'g')
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE d.datname = 'ferry' ORDER BY s.calls DESC, s.wal_bytes DESC`)
	require.NoError(t, err)
	type statement struct {
		Calls int64
		WAL   float64
		Query string
	}
	stmts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[statement])
	require.NoError(t, err)
	var b strings.Builder
	for _, s := range stmts {
		fmt.Fprintf(&b, "\n%6d calls %8.0f WAL bytes  %s", s.Calls, s.WAL, s.Query)
	}
	t.Logf("statements of the idle minute:%s", b.String())
}
