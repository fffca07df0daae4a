package jobs_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/store"
)

// logRecorder is a slog.Handler that keeps every record it is given.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}

// find returns the attributes of the records with the message, as strings.
func (l *logRecorder) find(msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.records {
		if r.Message != msg {
			continue
		}
		attrs := map[string]string{"level": r.Level.String()}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		out = append(out, attrs)
	}
	return out
}

func (l *logRecorder) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		out = append(out, r.Message)
	}
	return out
}

// startRiver starts River with Ferry's workers, the retention sweep every
// `every`, its warnings and River's own lines into rec, and its expiry
// observations into observed.
func startRiver(t *testing.T, pool *pgxpool.Pool, every time.Duration, rec *logRecorder, observe func(store.Expiry)) *river.Client[pgx.Tx] {
	t.Helper()
	return runRiver(t, pool, slog.New(rec), jobs.Config{RetentionEvery: every, Log: slog.New(rec), ObserveExpired: observe})
}

// Issue 9, item 4: expiry is never silent. Messages of a queue, deliveries
// of a subscription and dead letters of both that retention removes are
// each counted (by kind, per queue or subscription) and logged at WARN
// once per sweep per target, naming it; what is not expired is not
// counted.
func TestRetentionCountsAndLogsExpiry(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	sixty := 60
	q := queueWithRetention(t, pool, "short", sixty)
	kept, _, err := store.QueueUpsert(ctx, pool, "kept", store.QueuePatch{})
	require.NoError(t, err)
	send(t, pool, "short", 5)
	send(t, pool, "kept", 3)
	deadLetter(t, pool, q, 2)
	tp := upsertTopic(t, pool, "orders", store.TopicPatch{})
	sub, _, _, err := store.SubscriptionUpsert(ctx, pool, tp, "billing", store.SubscriptionPatch{Queue: store.QueuePatch{RetentionSeconds: &sixty}})
	require.NoError(t, err)
	for i := range 4 {
		_, _, err := store.EventPublish(ctx, pool, tp, []store.PublishEvent{{Type: "t", Data: json.RawMessage(`{"n":1}`), ID: string(rune('a' + i))}})
		require.NoError(t, err)
	}
	deadLetter(t, pool, sub.Queue, 1)
	// Everything is two minutes old: past the 60 s retention, within the
	// other queue's 4 days.
	for _, table := range []string{"messages SET sent_at", "dead_letters SET dead_lettered_at"} {
		_, err := pool.Exec(ctx, `UPDATE ferry.`+table+` = now() - interval '2 minutes' WHERE queue_id = ANY($1)`,
			[]int64{q.ID, sub.ID, kept.ID})
		require.NoError(t, err)
	}

	var (
		mu       sync.Mutex
		observed = map[int64]store.Expiry{}
	)
	rec := &logRecorder{}
	client := startRiver(t, pool, time.Hour, rec, func(x store.Expiry) {
		mu.Lock()
		defer mu.Unlock()
		o := observed[x.QueueID]
		o.QueueID, o.Name, o.Topic = x.QueueID, x.Name, x.Topic
		o.Messages += x.Messages
		o.DeadLetters += x.DeadLetters
		observed[x.QueueID] = o
	})
	runRetention(t, client)

	mu.Lock()
	require.Equal(t, map[int64]store.Expiry{
		q.ID:   {QueueID: q.ID, Name: "short", Messages: 3, DeadLetters: 2},
		sub.ID: {QueueID: sub.ID, Name: "billing", Topic: "orders", Messages: 3, DeadLetters: 1},
	}, observed)
	mu.Unlock()
	require.Equal(t, []map[string]string{{"level": "WARN", "queue": "short", "messages": "3", "dead_letters": "2"}},
		rec.find("retention removed unconsumed messages"))
	require.Equal(t, []map[string]string{{"level": "WARN", "topic": "orders", "subscription": "billing", "deliveries": "3", "dead_letters": "1"}},
		rec.find("retention removed unconsumed deliveries"))
	require.Equal(t, 3, count(t, pool, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, kept.ID))
}

// deadLetter claims n of q's messages and nacks them into the dead letters.
func deadLetter(t *testing.T, pool *pgxpool.Pool, q store.Queue, n int) {
	t.Helper()
	msgs, _, err := store.MessageClaim(context.Background(), pool, store.ClaimParams{Queue: q, Max: n, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, n)
	receipts := make([]store.Receipt, n)
	for i, m := range msgs {
		receipts[i] = m.Receipt
	}
	_, _, err = store.MessageNack(context.Background(), pool, store.NackParams{Queue: q, Receipts: receipts, DeadLetter: true})
	require.NoError(t, err)
}

// DESIGN.md invariant 12: the periodic sweeps write nothing when there is
// nothing to do. River's leader asks the database whether anything is due
// at each tick and inserts no job row when not; once something expires,
// the next tick runs the sweep.
func TestRetentionInsertsNoJobWhenNothingIsDue(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	q := queueWithRetention(t, pool, "short", 60)
	send(t, pool, "short", 2) // young: nothing due
	rec := &logRecorder{}
	startRiver(t, pool, 100*time.Millisecond, rec, nil)

	// Several ticks that found nothing.
	require.Eventually(t, func() bool {
		return len(rec.find("nothing due; no job inserted")) >= 5
	}, 30*time.Second, 20*time.Millisecond, "%v", rec.messages())
	require.Zero(t, count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1`, (jobs.RetentionArgs{}).Kind()))

	_, err := pool.Exec(ctx, `UPDATE ferry.messages SET sent_at = now() - interval '2 minutes' WHERE queue_id = $1`, q.ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return count(t, pool, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, q.ID) == 0
	}, 30*time.Second, 20*time.Millisecond, "the sweep runs once something is due")
	require.Positive(t, count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1`, (jobs.RetentionArgs{}).Kind()))
}

// The periodic retention sweep removes audit log entries older than
// AuditRetention, and only those; while none is old it inserts no job.
func TestRetentionRemovesOldAuditEntries(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	for _, r := range []string{"queue:old-1", "queue:old-2", "queue:young"} {
		require.NoError(t, store.AuditRecord(ctx, pool, store.AuditEntry{KeyName: "FERRY_ADMIN_KEY", Action: "queue.put",
			Resource: r, RequestID: "r", Status: 201}))
	}
	_, err := pool.Exec(ctx, `UPDATE ferry.audit_log SET at = now() - interval '2 days' WHERE resource LIKE 'queue:old-%'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE ferry.audit_log SET at = now() - interval '20 hours' WHERE resource = 'queue:young'`)
	require.NoError(t, err)

	rec := &logRecorder{}
	runRiver(t, pool, slog.New(rec), jobs.Config{RetentionEvery: 100 * time.Millisecond, Log: slog.New(rec), AuditRetention: 24 * time.Hour})
	require.Eventually(t, func() bool {
		return count(t, pool, `SELECT count(*) FROM ferry.audit_log`) == 1
	}, 30*time.Second, 20*time.Millisecond, "the sweep removes the old entries")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry.audit_log WHERE resource = 'queue:young'`))
	jobsBefore := count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1`, (jobs.RetentionArgs{}).Kind())
	ticks := len(rec.find("nothing due; no job inserted"))
	require.Eventually(t, func() bool {
		return len(rec.find("nothing due; no job inserted")) >= ticks+3
	}, 30*time.Second, 20*time.Millisecond, "%v", rec.messages())
	require.Equal(t, jobsBefore, count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1`, (jobs.RetentionArgs{}).Kind()),
		"a young entry makes no sweep due")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry.audit_log`))
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
