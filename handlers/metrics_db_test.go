package handlers_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/ferrytest"
	"github.com/ferry-mq/ferry/internal/pgtest"
	"github.com/ferry-mq/ferry/internal/server"
)

// TestMetricsDatabaseHealth: /metrics carries the database health gauges
// of Ferry's tables and River's job table, the oldest transaction and
// xmin ages, and the pool's statistics, with plausible values; a
// transaction left open shows as at least as old as it is.
func TestMetricsDatabaseHealth(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "hq", nil)
	send(t, env, "hq", msg(1), msg(2))

	// A transaction left open on Ferry's database, a second old before the
	// first scrape (which reads the health gauges for the next minute).
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
	opened := time.Now()
	require.Eventually(t, func() bool {
		var old bool
		require.NoError(t, tx.QueryRow(ctx, `SELECT clock_timestamp() - now() >= interval '1 second'`).Scan(&old))
		return old
	}, 30*time.Second, 50*time.Millisecond, "the transaction is a second old")

	m, text := metrics(t, env)
	for _, table := range []string{"ferry.messages", "ferry.queues", "ferry.events", "public.river_job"} {
		require.Positive(t, m[`ferry_db_table_bytes{table="`+table+`"}`]+m[`ferry_db_index_bytes{table="`+table+`"}`], table)
		require.Positive(t, m[`ferry_db_index_bytes{table="`+table+`"}`], "%s has indexes", table)
		require.Contains(t, m, `ferry_db_live_tuples{table="`+table+`"}`)
		require.Contains(t, m, `ferry_db_dead_tuples{table="`+table+`"}`)
	}
	require.Contains(t, text, "# TYPE ferry_db_dead_tuples gauge")
	for _, holder := range []string{"backend", "prepared_xact"} {
		require.Contains(t, m, `ferry_db_oldest_xact_age_seconds{holder="`+holder+`"}`)
	}
	for _, holder := range []string{"backend", "prepared_xact", "replication_slot"} {
		require.GreaterOrEqual(t, m[`ferry_db_oldest_xmin_age_transactions{holder="`+holder+`"}`], 0.0)
		require.Contains(t, m, `ferry_db_oldest_xmin_age_transactions{holder="`+holder+`"}`)
	}

	// The pool: its size as configured, connections in use by now.
	require.Equal(t, float64(env.Config.DBMaxConns), m[`ferry_pool_max_connections{pool="main"}`])
	total := m[`ferry_pool_total_connections{pool="main"}`]
	require.GreaterOrEqual(t, total, 1.0)
	require.LessOrEqual(t, total, float64(env.Config.DBMaxConns))
	require.Equal(t, total, m[`ferry_pool_connections{pool="main",state="acquired"}`]+m[`ferry_pool_connections{pool="main",state="idle"}`]+
		m[`ferry_pool_connections{pool="main",state="constructing"}`])
	require.Positive(t, m[`ferry_pool_acquires_total{pool="main"}`])
	require.Contains(t, m, `ferry_pool_acquire_waits_total{pool="main"}`)
	require.Contains(t, m, `ferry_pool_acquire_wait_seconds_total{pool="main"}`)
	require.Contains(t, text, "# TYPE ferry_pool_acquires_total counter")

	age := m[`ferry_db_oldest_xact_age_seconds{holder="backend"}`]
	require.GreaterOrEqual(t, age, 1.0, "an open transaction's age")
	t.Logf("transaction open for %v: gauge %.3f s", time.Since(opened), age)
	require.LessOrEqual(t, age, time.Since(opened).Seconds()+1, "no older than it is (plus the clock's grain)")
}

// TestMetricsDirectPool: with FERRY_DATABASE_DIRECT_URL, the direct pool
// (River, the notifier's LISTEN, seeks) is reported beside the main one,
// told apart by the pool label, each with its own size.
func TestMetricsDirectPool(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	env := ferrytest.StartOn(t, db, func(c *server.Config) {
		c.DatabaseDirectURL = db
		c.DBDirectMaxConns = 3
	})
	require.Eventually(t, func() bool {
		m, _ := metrics(t, env)
		return m[`ferry_pool_total_connections{pool="direct"}`] >= 1 // River's LISTEN, at least
	}, 30*time.Second, 50*time.Millisecond, "the direct pool's connections")
	m, _ := metrics(t, env)
	require.Equal(t, float64(env.Config.DBMaxConns), m[`ferry_pool_max_connections{pool="main"}`])
	require.Equal(t, 3.0, m[`ferry_pool_max_connections{pool="direct"}`])
	require.Contains(t, m, `ferry_pool_connections{pool="direct",state="acquired"}`)
	require.Contains(t, m, `ferry_pool_acquires_total{pool="direct"}`)
}

// TestMetricsHealthInterval: the database health gauges are read at most
// once per minute (or per FERRY_METRICS_INTERVAL, if longer), however
// often the depth gauges are read: a scrape every 15 s must not cost the
// sizes of every table each time.
func TestMetricsHealthInterval(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.MetricsInterval = 20 * time.Millisecond })
	require.Eventually(t, func() bool {
		m, _ := metrics(t, env)
		return m[`ferry_metrics_refreshes_total`] >= 3
	}, 30*time.Second, 30*time.Millisecond, "the depth gauges are read again")
	m, _ := metrics(t, env)
	require.Equal(t, 1.0, m[`ferry_metrics_health_refreshes_total`], "one health read")
	require.Positive(t, m[`ferry_db_table_bytes{table="ferry.queues"}`], "the health gauges are there")
}
