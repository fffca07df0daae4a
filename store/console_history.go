package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The history behind the console's charts: samples of each queue and
// subscription (ferry.queue_samples), topic (ferry.topic_samples) and
// consumer group (ferry.group_samples), a row a minute at most
// (migrations 000018 and 000020).
//
// A sample holds what the engine's own counters said when it was taken:
// a queue's depth and dead letters, and the totals of messages that came
// in and of dead letters made (ferry.queue_counts' added and
// dead_lettered, which the counter triggers keep for every face: REST,
// the SQL API, SQS, push, retention); a topic's events published so far
// (its partitions' next offsets); a group's lag. A minute's rates are the
// differences from the sample before it, so nothing on the hot path
// counts anything for the console.
//
// Samples older than SampleHistory go when their target is sampled
// again, but for the newest of them: every sample keeps the one before
// it, so a chart's first minute has its base, and a target's first
// sample ever is the only one without one (its totals count from zero).
//
// [SamplesWrite] runs on every instance, once a minute. It writes a
// sample only of what changed since its last sample: with no traffic it
// reads and writes nothing else (DESIGN.md invariant 12: no row, no WAL).
// Several instances behind a load balancer make one history: a sample is
// a reading of shared counters, not a count of this instance's traffic,
// so two instances sampling one minute write the same minute's row (the
// later reading kept), and nothing is counted twice.

// SampleHistory is how long samples are kept.
const SampleHistory = 2 * time.Hour

// SamplesWrite takes the sample of the minute of at (the database's clock
// when at is zero) of every queue, subscription, topic and group whose
// counters changed since its last sample, and removes their samples older
// than SampleHistory (but for the newest of those, the base of the
// next). The three statements run as one batch: one
// transaction, which writes nothing when nothing changed.
func SamplesWrite(ctx context.Context, db DBTX, at time.Time) error {
	var when *time.Time
	if !at.IsZero() {
		when = &at
	}
	b := &pgx.Batch{}
	b.Queue(queueSamplesWrite, when, SampleHistory)
	b.Queue(topicSamplesWrite, when, SampleHistory)
	b.Queue(groupSamplesWrite, when, SampleHistory)
	err := db.SendBatch(ctx, b).Close()
	return interpretError("samples write", err)
}

// queueSamplesWrite: the totals of every queue with counters, compared
// with its newest sample (one index probe each); the changed ones written.
// The newer reading of one minute wins (the greater added total; equal:
// the later statement).
const queueSamplesWrite = `/* ferry:queue_samples_write */
	WITH at AS (SELECT coalesce($1::timestamptz, now()) AS t),
	cur AS (
		SELECT queue_id, sum(messages)::bigint AS depth, sum(dead_letters)::bigint AS dead_letters,
			sum(added)::bigint AS added, sum(dead_lettered)::bigint AS dead_lettered
		FROM ferry.queue_counts GROUP BY queue_id
	), changed AS (
		SELECT c.* FROM cur c
		LEFT JOIN LATERAL (
			SELECT s.depth, s.dead_letters, s.added, s.dead_lettered FROM ferry.queue_samples s
			WHERE s.queue_id = c.queue_id ORDER BY s.minute DESC LIMIT 1
		) l ON true
		WHERE CASE WHEN l.depth IS NULL THEN (c.depth, c.dead_letters, c.added, c.dead_lettered) <> (0, 0, 0, 0)
			ELSE (c.depth, c.dead_letters, c.added, c.dead_lettered) IS DISTINCT FROM (l.depth, l.dead_letters, l.added, l.dead_lettered) END
	), gone AS (
		DELETE FROM ferry.queue_samples s USING changed c, at
		WHERE s.queue_id = c.queue_id AND s.minute < (
			SELECT max(x.minute) FROM ferry.queue_samples x WHERE x.queue_id = c.queue_id AND x.minute <= at.t - $2::interval)
	)
	INSERT INTO ferry.queue_samples AS s (queue_id, minute, depth, dead_letters, added, dead_lettered)
	SELECT c.queue_id, date_trunc('minute', at.t), c.depth, c.dead_letters, c.added, c.dead_lettered
	FROM changed c JOIN ferry.queues q ON q.id = c.queue_id, at
	ORDER BY c.queue_id
	ON CONFLICT (queue_id, minute) DO UPDATE SET depth = excluded.depth, dead_letters = excluded.dead_letters,
		added = excluded.added, dead_lettered = excluded.dead_lettered
	WHERE s.added IS NULL OR excluded.added >= s.added`

// topicSamplesWrite: the events published so far of every topic (the sum
// of its partitions' next offsets), written where it changed.
var topicSamplesWrite = `/* ferry:topic_samples_write */
	WITH at AS (SELECT coalesce($1::timestamptz, now()) AS t),
	cur AS (
		SELECT p.topic_id, sum(` + partitionNextSQL("p") + `)::bigint AS published FROM ferry.topic_partitions p GROUP BY p.topic_id
	), changed AS (
		SELECT c.* FROM cur c
		LEFT JOIN LATERAL (
			SELECT s.published FROM ferry.topic_samples s WHERE s.topic_id = c.topic_id ORDER BY s.minute DESC LIMIT 1
		) l ON true
		WHERE l.published IS DISTINCT FROM c.published AND (l.published IS NOT NULL OR c.published <> 0)
	), gone AS (
		DELETE FROM ferry.topic_samples s USING changed c, at
		WHERE s.topic_id = c.topic_id AND s.minute < (
			SELECT max(x.minute) FROM ferry.topic_samples x WHERE x.topic_id = c.topic_id AND x.minute <= at.t - $2::interval)
	)
	INSERT INTO ferry.topic_samples AS s (topic_id, minute, published)
	SELECT c.topic_id, date_trunc('minute', at.t), c.published
	FROM changed c JOIN ferry.topics t ON t.id = c.topic_id, at
	ORDER BY c.topic_id
	ON CONFLICT (topic_id, minute) DO UPDATE SET published = greatest(s.published, excluded.published)`

// groupSamplesWrite: every group's lag (head minus committed, summed over
// its partitions), written where it changed.
var groupSamplesWrite = `/* ferry:group_samples_write */
	WITH at AS (SELECT coalesce($1::timestamptz, now()) AS t),
	cur AS (
		SELECT g.id, coalesce((
			SELECT sum(greatest(` + partitionNextSQL("tp") + ` - 1 - ` + groupCommittedSQL("gp") + `, 0))
			FROM ferry.group_partitions gp JOIN ferry.topic_partitions tp ON tp.topic_id = g.topic_id AND tp.partition = gp.partition
			WHERE gp.group_id = g.id), 0)::bigint AS lag
		FROM ferry.consumer_groups g
	), changed AS (
		SELECT c.* FROM cur c
		LEFT JOIN LATERAL (
			SELECT s.lag FROM ferry.group_samples s WHERE s.group_id = c.id ORDER BY s.minute DESC LIMIT 1
		) l ON true
		WHERE l.lag IS DISTINCT FROM c.lag AND (l.lag IS NOT NULL OR c.lag <> 0)
	), gone AS (
		DELETE FROM ferry.group_samples s USING changed c, at
		WHERE s.group_id = c.id AND s.minute < (
			SELECT max(x.minute) FROM ferry.group_samples x WHERE x.group_id = c.id AND x.minute <= at.t - $2::interval)
	)
	INSERT INTO ferry.group_samples AS s (group_id, minute, lag)
	SELECT c.id, date_trunc('minute', at.t), c.lag FROM changed c, at
	ORDER BY c.id
	ON CONFLICT (group_id, minute) DO UPDATE SET lag = excluded.lag`

// QueueSample is a queue's or subscription's counters at a minute.
type QueueSample struct {
	Minute             time.Time
	Depth, DeadLetters int64
	// Added and DeadLettered are the totals of messages that came in and
	// of dead letters made, so far; Totals is false in a sample an older
	// binary wrote, which has none.
	Added, DeadLettered int64
	Totals              bool
}

// QueueSampleList returns the samples of the queue (topic "") or
// subscription of the last `since`, oldest first, after the newest sample
// before them (the base the first minute's rates are counted from), if
// any.
func QueueSampleList(ctx context.Context, db DBTX, topic, name string, since time.Duration) ([]QueueSample, error) {
	rows, err := db.Query(ctx, `/* ferry:queue_sample_list */
		WITH q AS (
			SELECT q.id FROM ferry.queues q LEFT JOIN ferry.topics t ON t.id = q.topic_id
			WHERE q.name = $2 AND coalesce(t.name, '') = $1
		)
		SELECT * FROM (
			SELECT s.minute, s.depth, s.dead_letters, s.added, s.dead_lettered FROM q
			JOIN LATERAL (SELECT * FROM ferry.queue_samples s WHERE s.queue_id = q.id AND s.minute < now() - $3::interval
				ORDER BY s.minute DESC LIMIT 1) s ON true
			UNION ALL
			SELECT s.minute, s.depth, s.dead_letters, s.added, s.dead_lettered FROM q
			JOIN ferry.queue_samples s ON s.queue_id = q.id AND s.minute >= now() - $3::interval
		) x ORDER BY minute`, topic, name, since)
	if err != nil {
		return nil, interpretError("queue sample list", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueueSample, error) {
		var s QueueSample
		var added, dead *int64
		err := row.Scan(&s.Minute, &s.Depth, &s.DeadLetters, &added, &dead)
		if added != nil && dead != nil {
			s.Added, s.DeadLettered, s.Totals = *added, *dead, true
		}
		return s, err
	})
	return out, interpretError("queue sample list", err)
}

// Sample is one minute's value of a topic's or group's history.
type Sample struct {
	Minute time.Time
	Value  int64
}

// GroupSampleList returns the lag samples of the group of the last
// `since`, oldest first, after the newest one before them, if any.
func GroupSampleList(ctx context.Context, db DBTX, topic, group string, since time.Duration) ([]Sample, error) {
	rows, err := db.Query(ctx, `/* ferry:group_sample_list */
		WITH g AS (
			SELECT g.id FROM ferry.topics t JOIN ferry.consumer_groups g ON g.topic_id = t.id AND g.name = $2 WHERE t.name = $1
		)
		SELECT * FROM (
			SELECT s.minute, s.lag FROM g JOIN LATERAL (SELECT * FROM ferry.group_samples s
				WHERE s.group_id = g.id AND s.minute < now() - $3::interval ORDER BY s.minute DESC LIMIT 1) s ON true
			UNION ALL
			SELECT s.minute, s.lag FROM g JOIN ferry.group_samples s ON s.group_id = g.id AND s.minute >= now() - $3::interval
		) x ORDER BY minute`, topic, group, since)
	return collectSamples(rows, err, "group sample list")
}

// TopicSampleList returns the published-so-far samples of the topic of
// the last `since`, oldest first, after the newest one before them, if
// any. A topic made within `since` has no sample before its first: it
// gets a zero a minute before that (every event it holds was published
// since it was made), so its first minute has a rate too.
func TopicSampleList(ctx context.Context, db DBTX, topic string, since time.Duration) ([]Sample, error) {
	rows, err := db.Query(ctx, `/* ferry:topic_sample_list */
		WITH t AS (SELECT id, created_at FROM ferry.topics WHERE name = $1),
		base AS (
			SELECT s.minute, s.published FROM t JOIN LATERAL (SELECT * FROM ferry.topic_samples s
				WHERE s.topic_id = t.id AND s.minute < now() - $2::interval ORDER BY s.minute DESC LIMIT 1) s ON true
		), recent AS (
			SELECT s.minute, s.published FROM t JOIN ferry.topic_samples s ON s.topic_id = t.id AND s.minute >= now() - $2::interval
		)
		SELECT * FROM (
			SELECT * FROM base
			UNION ALL
			SELECT * FROM recent
			UNION ALL
			SELECT (SELECT min(minute) FROM recent) - interval '1 minute', 0 FROM t
			WHERE t.created_at >= now() - $2::interval AND NOT EXISTS (SELECT FROM base) AND EXISTS (SELECT FROM recent)
		) x ORDER BY minute`, topic, since)
	return collectSamples(rows, err, "topic sample list")
}

func collectSamples(rows pgx.Rows, err error, op string) ([]Sample, error) {
	if err != nil {
		return nil, interpretError(op, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Sample, error) {
		var s Sample
		err := row.Scan(&s.Minute, &s.Value)
		return s, err
	})
	return out, interpretError(op, err)
}
