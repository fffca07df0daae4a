package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// setup returns a pool and a started River client running Ferry's workers
// (periodic sweeps set far apart, so only what a test inserts runs).
func setup(t *testing.T) (*pgxpool.Pool, *river.Client[pgx.Tx]) {
	t.Helper()
	pool := pgtest.NewPool(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return pool, runRiver(t, pool, log, jobs.Config{RetentionEvery: time.Hour})
}

// runRiver starts River with Ferry's workers (registered with cfg),
// logging to log; it is stopped when the test ends.
func runRiver(t *testing.T, pool *pgxpool.Pool, log *slog.Logger, cfg jobs.Config) *river.Client[pgx.Tx] {
	t.Helper()
	rcfg := &river.Config{
		Logger:            log,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
	}
	jobs.Register(rcfg, pool, cfg)
	client, err := river.NewClient(riverpgxv5.New(pool), rcfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	return client
}

// awaitJob runs do and waits until a job of kind has completed.
func awaitJob(t *testing.T, client *river.Client[pgx.Tx], kind string, do func() error) {
	t.Helper()
	events, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	require.NoError(t, do())
	waitFor(t, events, kind)
}

// runRetention inserts a retention job and waits until it has completed.
func runRetention(t *testing.T, client *river.Client[pgx.Tx]) {
	t.Helper()
	awaitJob(t, client, (jobs.RetentionArgs{}).Kind(), func() error {
		_, err := client.Insert(context.Background(), jobs.RetentionArgs{}, nil)
		return err
	})
}

// upsertTopic creates the topic with patch.
func upsertTopic(t *testing.T, pool *pgxpool.Pool, name string, patch store.TopicPatch) store.Topic {
	t.Helper()
	tp, _, err := store.TopicUpsert(context.Background(), pool, name, patch)
	require.NoError(t, err)
	return tp
}

// queueWithRetention creates queue name with the retention in seconds.
func queueWithRetention(t *testing.T, pool *pgxpool.Pool, name string, seconds int) store.Queue {
	t.Helper()
	q, _, err := store.QueueUpsert(context.Background(), pool, name, store.QueuePatch{RetentionSeconds: &seconds})
	require.NoError(t, err)
	return q
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

	awaitJob(t, client, (jobs.QueueCleanupArgs{}).Kind(), func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id, err := store.QueueDelete(ctx, tx, "doomed")
			if err != nil {
				return err
			}
			return jobs.InsertQueueCleanup(ctx, client, tx, id)
		})
	})

	for _, table := range []string{"ferry.messages", "ferry.dead_letters", "ferry.dedup", "ferry.queue_counts"} {
		require.Zero(t, count(t, pool, `SELECT count(*) FROM `+table+` WHERE queue_id = $1`, q.ID), table)
	}
}

// The retention job deletes messages older than their queue's retention and
// dedup ids past their window (one job for both), and leaves younger ones
// alone.
func TestRetentionAndDedupJobs(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	q := queueWithRetention(t, pool, "short", 60)
	send(t, pool, "short", 50)
	// The clock edge: half the messages were sent 61 s ago, just past retention.
	_, err := pool.Exec(ctx, `UPDATE ferry.messages SET sent_at = now() - interval '61 seconds' WHERE queue_id = $1 AND id % 2 = 0`, q.ID)
	require.NoError(t, err)
	old := count(t, pool, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND id % 2 = 0`, q.ID)
	_, err = pool.Exec(ctx, `UPDATE ferry.dedup SET expires_at = now() - interval '1 second' WHERE queue_id = $1 AND message_id % 2 = 0`, q.ID)
	require.NoError(t, err)

	runRetention(t, client) // dedup ids too

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

// publishN publishes n events with ids prefix-0.. to the topic, in batches.
func publishN(t *testing.T, pool *pgxpool.Pool, tp store.Topic, prefix string, n int) {
	t.Helper()
	for start := 0; start < n; start += 1000 {
		var batch []store.PublishEvent
		for i := start; i < min(n, start+1000); i++ {
			batch = append(batch, store.PublishEvent{ID: fmt.Sprintf("%s-%d", prefix, i), Type: "t", Data: json.RawMessage(`{"n":1}`)})
		}
		_, _, err := store.EventPublish(context.Background(), pool, tp, batch)
		require.NoError(t, err)
	}
}

// Deleting a topic inserts its cleanup job in the same transaction; the job
// removes every row the topic had, across several of its bounded batches
// (more events than one batch), and nothing of other topics.
func TestTopicCleanupJob(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	tp := upsertTopic(t, pool, "doomed", store.TopicPatch{})
	other := upsertTopic(t, pool, "other", store.TopicPatch{})
	publishN(t, pool, tp, "e", 6200)
	publishN(t, pool, other, "e", 10)

	awaitJob(t, client, (jobs.TopicCleanupArgs{}).Kind(), func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id, _, err := store.TopicDelete(ctx, tx, "doomed")
			if err != nil {
				return err
			}
			return jobs.InsertTopicCleanup(ctx, client, tx, id)
		})
	})

	for _, table := range []string{"ferry.events", "ferry.event_dedup", "ferry.topic_partitions"} {
		require.Zero(t, count(t, pool, `SELECT count(*) FROM `+table+` WHERE topic_id = $1`, tp.ID), table)
	}
	require.Equal(t, 10, count(t, pool, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, other.ID))
	require.Equal(t, 10, count(t, pool, `SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1`, other.ID))
	require.Equal(t, 4, count(t, pool, `SELECT count(*) FROM ferry.topic_partitions WHERE topic_id = $1`, other.ID))
}

// A cleanup job inserted with a delete that rolls back never runs against
// the live topic: nothing is deleted.
func TestTopicCleanupJobRolledBack(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	tp := upsertTopic(t, pool, "kept", store.TopicPatch{})
	publishN(t, pool, tp, "e", 20)
	errRollback := errors.New("roll back")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		id, _, err := store.TopicDelete(ctx, tx, "kept")
		if err != nil {
			return err
		}
		if err := jobs.InsertTopicCleanup(ctx, client, tx, id); err != nil {
			return err
		}
		return errRollback
	})
	require.ErrorIs(t, err, errRollback)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1`, (jobs.TopicCleanupArgs{}).Kind()))
	require.Equal(t, 20, count(t, pool, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
	_, err = store.TopicGet(ctx, pool, "kept")
	require.NoError(t, err)
}

// The retention job deletes events older than their topic's retention (and
// only those), and forgets event ids past their window.
func TestTopicRetentionAndDedupJobs(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	sixty, one := 60, 1
	tp := upsertTopic(t, pool, "short", store.TopicPatch{RetentionSeconds: &sixty, Partitions: &one})
	long := upsertTopic(t, pool, "long", store.TopicPatch{Partitions: &one})
	publishN(t, pool, tp, "s", 50)
	publishN(t, pool, long, "l", 10)
	// The clock edge: offsets 0-19 were published 61 s ago, just past
	// retention; the other topic's events are as old, within its 7 days.
	_, err := pool.Exec(ctx, `UPDATE ferry.events SET published_at = now() - interval '61 seconds' WHERE topic_id = $1 AND "offset" < 20`, tp.ID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE ferry.events SET published_at = now() - interval '61 seconds' WHERE topic_id = $1`, long.ID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE ferry.event_dedup SET expires_at = now() - interval '1 second' WHERE topic_id = $1 AND "offset" % 2 = 0`, tp.ID)
	require.NoError(t, err)

	runRetention(t, client) // dedup ids too

	require.Equal(t, 30, count(t, pool, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
	require.Equal(t, 20, count(t, pool, `SELECT min("offset") FROM ferry.events WHERE topic_id = $1`, tp.ID), "oldest first")
	require.Equal(t, 10, count(t, pool, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, long.ID))
	offs, err := store.TopicOffsets(ctx, pool, []int64{tp.ID})
	require.NoError(t, err)
	require.Equal(t, []store.PartitionOffsets{{Partition: 0, HeadOffset: 49, OldestOffset: 20}}, offs[tp.ID])
	require.Equal(t, 25, count(t, pool, `SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1`, tp.ID))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM ferry.event_dedup WHERE expires_at < now()`))
	require.Equal(t, 10, count(t, pool, `SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1`, long.ID))
}
