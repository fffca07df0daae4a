package jobs_test

import (
	"context"
	"encoding/json"
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
