package push_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/push"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/store"
)

// statements records every statement run on a pool's connections.
type statements struct {
	mu   sync.Mutex
	sqls []string
}

type sqlKey struct{}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	sql := strings.Join(strings.Fields(d.SQL), " ")
	s.mu.Lock()
	s.sqls = append(s.sqls, sql)
	s.mu.Unlock()
	return context.WithValue(ctx, sqlKey{}, sql)
}

// TraceQueryEnd records the end of a LISTEN (as "LISTENING"): the
// Notifier has started listening then.
func (s *statements) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if sql, _ := ctx.Value(sqlKey{}).(string); strings.HasPrefix(sql, "LISTEN") {
		s.mu.Lock()
		s.sqls = append(s.sqls, "LISTENING")
		s.mu.Unlock()
	}
}

// since returns the statements after the first n.
func (s *statements) since(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sqls[n:]...)
}

func (s *statements) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sqls)
}

// Idle means quiet (issue 9 item 2): a Pusher with push targets and no
// traffic runs no statement but its slow fallback sweep (a read) and
// writes nothing; a kick then acquires a lease (so the count does see
// push's statements). Not parallel: the cluster's transaction ids must be
// this test's alone.
func TestPusherIdleRunsOnlyItsSweep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	require.NoError(t, err)
	stmts := &statements{}
	cfg.ConnConfig.Tracer = stmts
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	var targets []int64
	for _, name := range []string{"a", "b"} {
		url := "http://127.0.0.1:9/" + name
		q, _, err := store.QueueUpsert(ctx, pool, name, store.QueuePatch{Push: &store.PushPatch{URL: &url, NewSecret: push.NewSigningSecret()}})
		require.NoError(t, err)
		targets = append(targets, q.ID)
	}
	log := slog.New(slog.DiscardHandler)
	notifier := store.NewNotifier(pool, 0, log)
	stop := make(chan struct{})
	p := push.New(pool, push.Config{Notifier: notifier, Stop: stop, Log: log, IdleFor: 100 * time.Millisecond})
	var wg sync.WaitGroup
	wg.Go(func() { notifier.Run(ctx) })
	wg.Go(func() { p.Run(ctx) })
	defer func() { close(stop); cancel(); wg.Wait() }()

	// The sweep after the listener started (it may have missed NOTIFYs
	// until then), then a quiet window.
	require.Eventually(t, func() bool {
		listening := false
		for _, s := range stmts.since(0) {
			listening = listening || s == "LISTENING"
			if listening && strings.Contains(s, "ferry:push_sweep") {
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "the sweep once listening")
	xid := func() int64 {
		var x int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&x))
		return x
	}
	xid0 := xid()
	from := stmts.count()
	time.Sleep(10 * time.Second) // the thing measured: what an idle window runs
	idle := stmts.since(from)
	require.Equal(t, xid0, xid(), "no write transaction while idle")
	require.Empty(t, idle, "no statement within the fallback sweep's 30 s")

	// A kick is seen: it leases the target (and its worker runs).
	from = stmts.count()
	p.Kick(ctx, targets[:1])
	require.Eventually(t, func() bool {
		for _, s := range stmts.since(from) {
			if strings.Contains(s, "ferry:push_lease_acquire") {
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "the kick's lease acquire")
}
