package handlers_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestMetricsCountRelayedEvents: ferry_events_published_total counts the
// events published through the SQL API once each, when the relay appends
// them: not the duplicates (of the batch, of an event already published),
// not a rolled-back publish, and not twice.
func TestMetricsCountRelayedEvents(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	db := sqlDB(t, env.DatabaseURL)
	ctx := context.Background()
	putTopic(t, env, "counted", map[string]any{"partitions": 2}, http.StatusCreated)
	const series = `ferry_events_published_total{topic="counted"}`
	m, _ := metrics(t, env)
	require.Zero(t, m[series])

	// Three fresh events (one of them keyless, without an id) and a
	// duplicate of the batch.
	got, err := sqlPublishBatch(ctx, db, "counted", []any{evt("t", "id", "a"), evt("t", "id", "b", "key", "k"), evt("t", "id", "a"), evt("t")})
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, true, false}, pluck(got, func(p client.Published) bool { return p.Duplicate }))
	// A duplicate of an event published before.
	got, err = sqlPublishBatch(ctx, db, "counted", []any{evt("t", "id", "b", "key", "k")})
	require.NoError(t, err)
	require.True(t, got[0].Duplicate)
	// A publish rolled back.
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = sqlPublishBatch(ctx, tx, "counted", []any{evt("t", "id", "c")})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	// One over REST, counted by its handler.
	publishEvents(t, env, "counted", evt("t", "id", "d"))

	pendingDrained(t, db)
	require.Eventually(t, func() bool {
		m, _ := metrics(t, env)
		return m[series] >= 4
	}, 10*time.Second, 5*time.Millisecond, "the relayed events counted")
	// Counted once: the next publish adds one.
	publishEvents(t, env, "counted", evt("t", "id", "e"))
	m, _ = metrics(t, env)
	require.Equal(t, 5.0, m[series], "3 relayed + 2 over REST")
	var appended int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM ferry.events e JOIN ferry.topics t ON t.id = e.topic_id WHERE t.name = 'counted'`).Scan(&appended))
	require.Equal(t, 5, appended, "events in the log")
}
