package jobs_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgtest"
	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// setup returns a pool and a started River client running Ferry's workers
// (periodic sweeps set far apart, so only what a test inserts runs).
func setup(t *testing.T) (*pgxpool.Pool, *river.Client[pgx.Tx]) {
	t.Helper()
	pool := pgtest.NewPool(t)
	cfg := &river.Config{
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
	}
	jobs.Register(cfg, pool, jobs.Config{RetentionEvery: time.Hour, DedupEvery: time.Hour})
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	return pool, client
}

func send(t *testing.T, pool *pgxpool.Pool, queue string, n int) {
	t.Helper()
	s := store.NewSender(pool, store.SenderConfig{Workers: 1})
	defer s.Close()
	msgs := make([]store.SendMessage, n)
	for i := range msgs {
		msgs[i] = store.SendMessage{Body: json.RawMessage(`{"n":1}`), DedupID: queue + string(rune('a'+i%26)) + string(rune('a'+i/26))}
	}
	_, _, err := s.Send(context.Background(), queue, msgs)
	require.NoError(t, err)
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// Deleting a queue inserts its cleanup job in the same transaction; the job
// removes every row the queue had.
func TestQueueCleanupJob(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	q, _, err := store.QueueUpsert(ctx, pool, "doomed", store.QueuePatch{})
	require.NoError(t, err)
	send(t, pool, "doomed", 300)

	events, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		id, err := store.QueueDelete(ctx, tx, "doomed")
		if err != nil {
			return err
		}
		return jobs.InsertQueueCleanup(ctx, client, tx, id)
	}))
	waitFor(t, events, (jobs.QueueCleanupArgs{}).Kind())

	for _, table := range []string{"ferry.messages", "ferry.dead_letters", "ferry.dedup", "ferry.queue_counts"} {
		require.Zero(t, count(t, pool, `SELECT count(*) FROM `+table+` WHERE queue_id = $1`, q.ID), table)
	}
}

// The retention job deletes messages older than their queue's retention and
// dedup ids past their window, and leaves younger ones alone.
func TestRetentionAndDedupJobs(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	sixty := 60
	q, _, err := store.QueueUpsert(ctx, pool, "short", store.QueuePatch{RetentionSeconds: &sixty})
	require.NoError(t, err)
	send(t, pool, "short", 50)
	// The clock edge: half the messages were sent 61 s ago, just past retention.
	_, err = pool.Exec(ctx, `UPDATE ferry.messages SET sent_at = now() - interval '61 seconds' WHERE queue_id = $1 AND id % 2 = 0`, q.ID)
	require.NoError(t, err)
	old := count(t, pool, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND id % 2 = 0`, q.ID)
	_, err = pool.Exec(ctx, `UPDATE ferry.dedup SET expires_at = now() - interval '1 second' WHERE queue_id = $1 AND message_id % 2 = 0`, q.ID)
	require.NoError(t, err)

	events, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	_, err = client.Insert(ctx, jobs.RetentionArgs{}, nil)
	require.NoError(t, err)
	waitFor(t, events, (jobs.RetentionArgs{}).Kind())
	_, err = client.Insert(ctx, jobs.DedupExpiryArgs{}, nil)
	require.NoError(t, err)
	waitFor(t, events, (jobs.DedupExpiryArgs{}).Kind())

	require.Equal(t, 50-old, count(t, pool, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, q.ID))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND sent_at < now() - interval '60 seconds'`, q.ID))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM ferry.dedup WHERE expires_at < now()`))
	stats, err := store.QueueStatsGet(ctx, pool, []int64{q.ID})
	require.NoError(t, err)
	require.EqualValues(t, 50-old, stats[q.ID].Available, "counters follow the sweep")
}

func waitFor(t *testing.T, events <-chan *river.Event, kind string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Job.Kind == kind {
				return
			}
		case <-timeout:
			t.Fatalf("job %s did not complete", kind)
		}
	}
}
