package handlers_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/ferrytest"
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
	require.Equal(t, float64(env.Config.DBMaxConns), m[`ferry_pool_max_connections`])
	total := m[`ferry_pool_total_connections`]
	require.GreaterOrEqual(t, total, 1.0)
	require.LessOrEqual(t, total, float64(env.Config.DBMaxConns))
	require.Equal(t, total, m[`ferry_pool_connections{state="acquired"}`]+m[`ferry_pool_connections{state="idle"}`]+
		m[`ferry_pool_connections{state="constructing"}`])
	require.Positive(t, m[`ferry_pool_acquires_total`])
	require.Contains(t, m, `ferry_pool_acquire_waits_total`)
	require.Contains(t, m, `ferry_pool_acquire_wait_seconds_total`)
	require.Contains(t, text, "# TYPE ferry_pool_acquires_total counter")

	// A transaction left open on Ferry's database.
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
		m, _ := metrics(t, env)
		return m[`ferry_db_oldest_xact_age_seconds{holder="backend"}`] >= 1
	}, 30*time.Second, 100*time.Millisecond, "an open transaction's age")
	m, _ = metrics(t, env)
	age := m[`ferry_db_oldest_xact_age_seconds{holder="backend"}`]
	t.Logf("transaction open for %v: gauge %.3f s", time.Since(opened), age)
	require.LessOrEqual(t, age, time.Since(opened).Seconds()+1, "no older than it is (plus the clock's grain)")
}
