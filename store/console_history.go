package store

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The history behind the console's charts: a sample a minute of each
// queue, subscription and consumer group that had traffic through this
// instance in that minute (ferry.queue_samples, ferry.group_samples;
// migration 000018). Traffic is noted in memory by the REST handlers
// ([Activity]) and written by [Activity.Flush] when the traffic pauses
// for a few seconds, or a minute after it began if it does not, and only
// when something was noted: an idle instance reads and writes nothing for
// it (DESIGN.md invariant 12), and the trailing write of the last traffic
// comes seconds after it. Each instance adds its own counts to the
// minute's row and sets the depth it read, so several instances behind
// a load balancer make one history. What bypasses the REST handlers (the
// SQL API, the SQS face, push deliveries) is not counted in the rates;
// the depth a sample reads is always the whole queue's.

// SampleHistory is how long samples are kept.
const SampleHistory = 2 * time.Hour

// targetKey names a queue ("", queue) or a subscription (topic, sub).
type targetKey struct{ topic, name string }

type targetCounts struct{ sent, acked int64 }

// Activity is the traffic noted since the last flush. Its methods are safe
// for concurrent use, and do nothing on a nil Activity.
type Activity struct {
	// Woke receives a value when something is noted after a flush.
	Woke    chan struct{}
	mu      sync.Mutex
	targets map[targetKey]targetCounts
	groups  map[targetKey]bool
}

// NewActivity returns an empty Activity.
func NewActivity() *Activity {
	return &Activity{Woke: make(chan struct{}, 1), targets: map[targetKey]targetCounts{}, groups: map[targetKey]bool{}}
}

// Note records traffic on a queue (topic "") or subscription: sent new
// messages, acked messages, or neither (a receive, a nack).
func (a *Activity) Note(topic, name string, sent, acked int) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k := targetKey{topic, name}
	c := a.targets[k]
	c.sent += int64(sent)
	c.acked += int64(acked)
	a.targets[k] = c
	a.wake()
}

// wake tells the sampler that something was noted (a.mu held).
func (a *Activity) wake() {
	select {
	case a.Woke <- struct{}{}:
	default:
	}
}

// NoteGroup records traffic on a consumer group (a poll or a commit).
func (a *Activity) NoteGroup(topic, group string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.groups[targetKey{topic, group}] = true
	a.wake()
}

// take returns what was noted and forgets it.
func (a *Activity) take() (map[targetKey]targetCounts, map[targetKey]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, g := a.targets, a.groups
	a.targets, a.groups = map[targetKey]targetCounts{}, map[targetKey]bool{}
	return t, g
}

// Flush writes a sample of every target noted since the last flush (none
// when nothing was: no statement at all) and removes their samples older
// than SampleHistory. A target deleted meanwhile is skipped.
func (a *Activity) Flush(ctx context.Context, db DBTX) error {
	if a == nil {
		return nil
	}
	targets, groups := a.take()
	if len(targets) > 0 {
		if err := queueSamplesWrite(ctx, db, targets); err != nil {
			return err
		}
	}
	if len(groups) > 0 {
		return groupSamplesWrite(ctx, db, groups)
	}
	return nil
}

func queueSamplesWrite(ctx context.Context, db DBTX, targets map[targetKey]targetCounts) error {
	var topics, names []string
	var sent, acked []int64
	for k, c := range targets {
		topics, names, sent, acked = append(topics, k.topic), append(names, k.name), append(sent, c.sent), append(acked, c.acked)
	}
	_, err := db.Exec(ctx, `/* ferry:queue_samples_write */
		WITH v AS (
			SELECT q.id, v.sent, v.acked FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS v(topic, name, sent, acked)
			JOIN ferry.queues q ON v.topic = '' AND q.topic_id IS NULL AND q.name = v.name
			UNION ALL
			SELECT q.id, v.sent, v.acked FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS v(topic, name, sent, acked)
			JOIN ferry.topics t ON t.name = v.topic JOIN ferry.queues q ON q.topic_id = t.id AND q.name = v.name
		), gone AS (
			DELETE FROM ferry.queue_samples s USING v WHERE s.queue_id = v.id AND s.minute < now() - $5::interval
		)
		INSERT INTO ferry.queue_samples AS s (queue_id, minute, depth, dead_letters, sent, acked)
		SELECT v.id, date_trunc('minute', now()), coalesce(c.messages, 0), coalesce(c.dead_letters, 0), v.sent, v.acked
		FROM v LEFT JOIN LATERAL (
			SELECT sum(messages)::bigint AS messages, sum(dead_letters)::bigint AS dead_letters FROM ferry.queue_counts WHERE queue_id = v.id
		) c ON true
		ORDER BY v.id
		ON CONFLICT (queue_id, minute) DO UPDATE SET depth = excluded.depth, dead_letters = excluded.dead_letters,
			sent = s.sent + excluded.sent, acked = s.acked + excluded.acked`,
		topics, names, sent, acked, SampleHistory)
	return interpretError("queue samples write", err)
}

func groupSamplesWrite(ctx context.Context, db DBTX, groups map[targetKey]bool) error {
	var topics, names []string
	for k := range groups {
		topics, names = append(topics, k.topic), append(names, k.name)
	}
	_, err := db.Exec(ctx, `/* ferry:group_samples_write */
		WITH v AS (
			SELECT g.id, g.topic_id FROM unnest($1::text[], $2::text[]) AS v(topic, name)
			JOIN ferry.topics t ON t.name = v.topic JOIN ferry.consumer_groups g ON g.topic_id = t.id AND g.name = v.name
		), gone AS (
			DELETE FROM ferry.group_samples s USING v WHERE s.group_id = v.id AND s.minute < now() - $3::interval
		)
		INSERT INTO ferry.group_samples AS s (group_id, minute, lag)
		SELECT v.id, date_trunc('minute', now()), coalesce(l.lag, 0)
		FROM v LEFT JOIN LATERAL (
			SELECT sum(greatest(tp.next_offset - 1 - gp.committed_offset, 0))::bigint AS lag
			FROM ferry.group_partitions gp JOIN ferry.topic_partitions tp ON tp.topic_id = v.topic_id AND tp.partition = gp.partition
			WHERE gp.group_id = v.id
		) l ON true
		ORDER BY v.id
		ON CONFLICT (group_id, minute) DO UPDATE SET lag = excluded.lag`,
		topics, names, SampleHistory)
	return interpretError("group samples write", err)
}

// QueueSample is one minute of a queue's or subscription's history.
type QueueSample struct {
	Minute             time.Time
	Depth, DeadLetters int64
	Sent, Acked        int64
}

// QueueSampleList returns the samples of the queue (topic "") or
// subscription of the last `since`, oldest first.
func QueueSampleList(ctx context.Context, db DBTX, topic, name string, since time.Duration) ([]QueueSample, error) {
	rows, err := db.Query(ctx, `/* ferry:queue_sample_list */
		SELECT s.minute, s.depth, s.dead_letters, s.sent, s.acked
		FROM ferry.queues q LEFT JOIN ferry.topics t ON t.id = q.topic_id
		JOIN ferry.queue_samples s ON s.queue_id = q.id AND s.minute >= now() - $3::interval
		WHERE q.name = $2 AND coalesce(t.name, '') = $1
		ORDER BY s.minute`, topic, name, since)
	if err != nil {
		return nil, interpretError("queue sample list", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueueSample, error) {
		var s QueueSample
		err := row.Scan(&s.Minute, &s.Depth, &s.DeadLetters, &s.Sent, &s.Acked)
		return s, err
	})
	return out, interpretError("queue sample list", err)
}

// GroupSample is one minute of a consumer group's history.
type GroupSample struct {
	Minute time.Time
	Lag    int64
}

// GroupSampleList returns the samples of the group of the last `since`,
// oldest first.
func GroupSampleList(ctx context.Context, db DBTX, topic, group string, since time.Duration) ([]GroupSample, error) {
	rows, err := db.Query(ctx, `/* ferry:group_sample_list */
		SELECT s.minute, s.lag FROM ferry.topics t
		JOIN ferry.consumer_groups g ON g.topic_id = t.id AND g.name = $2
		JOIN ferry.group_samples s ON s.group_id = g.id AND s.minute >= now() - $3::interval
		WHERE t.name = $1 ORDER BY s.minute`, topic, group, since)
	if err != nil {
		return nil, interpretError("group sample list", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (GroupSample, error) {
		var s GroupSample
		err := row.Scan(&s.Minute, &s.Lag)
		return s, err
	})
	return out, interpretError("group sample list", err)
}
