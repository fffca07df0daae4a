package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// What the console's overview reads (package handlers/console): names
// found by a part of them, and the queues, subscriptions and groups
// that need attention. Neither is a hot path; each is bounded by the number of
// queues or topics, not of messages.

// NameSearchParams selects one page of [QueueSearch] or [TopicSearch].
type NameSearchParams struct {
	// Part is what a name must contain ("": every name).
	Part string
	// After is the last name of the previous page ("": from the start).
	After string
	Limit int
}

// QueueSearch returns up to p.Limit queues (not subscriptions) whose
// names contain p.Part, named after p.After, by name, and whether more
// follow. It walks queues_name_idx from p.After on, so a page reads at
// most the names between it and the page's end: a few milliseconds for
// ten thousand queues.
func QueueSearch(ctx context.Context, db DBTX, p NameSearchParams) ([]Queue, bool, error) {
	rows, err := db.Query(ctx, `/* ferry:queue_search */
		SELECT `+queueColumns+` FROM ferry.queues q
		WHERE topic_id IS NULL AND name > $1 AND strpos(name, $3) > 0 ORDER BY name LIMIT $2`,
		p.After, pageLimit(p.Limit), p.Part)
	return pageCollect(rows, err, "queue search", p.Limit, func(row pgx.CollectableRow) (Queue, error) { return scanQueue(row) })
}

// TopicSearch is [QueueSearch] for topics.
func TopicSearch(ctx context.Context, db DBTX, p NameSearchParams) ([]Topic, bool, error) {
	rows, err := db.Query(ctx, `/* ferry:topic_search */
		SELECT `+topicColumns+` FROM ferry.topics
		WHERE name > $1 AND strpos(name, $3) > 0 ORDER BY name LIMIT $2`,
		p.After, pageLimit(p.Limit), p.Part)
	return pageCollect(rows, err, "topic search", p.Limit, func(row pgx.CollectableRow) (Topic, error) { return scanTopic(row) })
}

// What puts a queue, subscription or consumer group on the console's
// attention list, besides dead letters and a disabled push.
const (
	// TroubleOldAge: the oldest message (waiting or in flight) was sent
	// longer ago than this.
	TroubleOldAge = time.Hour
	// TroubleLag: a group's lag (events published and not yet
	// committed, over its partitions) is at least this.
	TroubleLag = 10_000
	// TroubleLagGrowth over TroubleLagWindow: a group's lag rose by at
	// least this much since its last sample at least TroubleLagWindow
	// old (a group falling behind, before it is far behind).
	TroubleLagGrowth = 100
	TroubleLagWindow = 10 * time.Minute
)

// Trouble is a queue or subscription that needs attention: it has dead
// letters, its push delivery is disabled, or its oldest message is older
// than TroubleOldAge.
type Trouble struct {
	// Topic is the subscription's topic; "" for a queue.
	Topic, Name      string
	DeadLetters      int64
	PushDisabled     bool
	OldestAgeSeconds int64
}

// TroubleList returns up to limit queues and subscriptions with disabled
// push, dead letters (most first) or an old oldest message (oldest
// first). It reads the trigger-kept counters (a few rows per queue), not
// the dead letters themselves, and probes the oldest message of each
// queue that the counters say holds any: one index probe per non-empty
// queue, never a walk of a queue's messages.
func TroubleList(ctx context.Context, db DBTX, limit int) ([]Trouble, error) {
	rows, err := db.Query(ctx, `/* ferry:trouble_list */
		WITH c AS (
			SELECT queue_id, sum(messages)::bigint AS messages, sum(dead_letters)::bigint AS dead_letters
			FROM ferry.queue_counts GROUP BY queue_id HAVING sum(messages) > 0 OR sum(dead_letters) > 0
		), cand AS (
			SELECT q.id, q.topic_id, q.name, q.push_disabled_at, coalesce(c.messages, 0) AS messages, coalesce(c.dead_letters, 0) AS dead_letters
			FROM ferry.queues q LEFT JOIN c ON c.queue_id = q.id
			WHERE c.queue_id IS NOT NULL OR q.push_disabled_at IS NOT NULL
		), aged AS (
			SELECT cand.*, coalesce(extract(epoch FROM now() - o.sent_at)::bigint, 0) AS age FROM cand
			LEFT JOIN LATERAL (
				SELECT sent_at FROM ferry.messages m WHERE m.queue_id = cand.id AND cand.messages > 0 ORDER BY m.id LIMIT 1
			) o ON true
		)
		SELECT coalesce(t.name, ''), a.name, a.dead_letters, a.push_disabled_at IS NOT NULL, greatest(a.age, 0)
		FROM aged a LEFT JOIN ferry.topics t ON t.id = a.topic_id
		WHERE a.dead_letters > 0 OR a.push_disabled_at IS NOT NULL OR a.age > $2
		ORDER BY a.push_disabled_at IS NULL, a.dead_letters DESC, a.age DESC, t.name NULLS FIRST, a.name
		LIMIT $1`, limit, int64(TroubleOldAge/time.Second))
	if err != nil {
		return nil, interpretError("trouble list", err)
	}
	ts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Trouble, error) {
		var t Trouble
		err := row.Scan(&t.Topic, &t.Name, &t.DeadLetters, &t.PushDisabled, &t.OldestAgeSeconds)
		return t, err
	})
	return ts, interpretError("trouble list", err)
}

// GroupTrouble is a consumer group that needs attention: its lag is at
// least TroubleLag, or grew by at least TroubleLagGrowth since its sample
// of TroubleLagWindow ago.
type GroupTrouble struct {
	Topic, Group string
	Lag          int64
	// Growth is the lag's rise since Since (0 when no sample is that
	// old); Since is the minute of that sample.
	Growth int64
	Since  time.Time
}

// GroupTroubleList returns up to limit consumer groups with a high or
// growing lag, the largest first. Each group's lag is read from its
// partitions' rows and compared with its newest sample at least
// TroubleLagWindow old (one index probe of ferry.group_samples).
func GroupTroubleList(ctx context.Context, db DBTX, limit int) ([]GroupTrouble, error) {
	rows, err := db.Query(ctx, `/* ferry:group_trouble_list */
		WITH g AS (
			SELECT t.name AS topic, g.name, coalesce(l.lag, 0) AS lag, s.lag AS then_lag, s.minute
			FROM ferry.consumer_groups g JOIN ferry.topics t ON t.id = g.topic_id
			LEFT JOIN LATERAL (
				SELECT sum(greatest(`+partitionNextSQL("tp")+` - 1 - `+groupCommittedSQL("gp")+`, 0))::bigint AS lag
				FROM ferry.group_partitions gp JOIN ferry.topic_partitions tp ON tp.topic_id = g.topic_id AND tp.partition = gp.partition
				WHERE gp.group_id = g.id
			) l ON true
			LEFT JOIN LATERAL (
				SELECT s.lag, s.minute FROM ferry.group_samples s
				WHERE s.group_id = g.id AND s.minute <= now() - $2::interval ORDER BY s.minute DESC LIMIT 1
			) s ON true
		)
		SELECT topic, name, lag, greatest(lag - coalesce(then_lag, lag), 0), coalesce(minute, 'epoch'::timestamptz) FROM g
		WHERE lag >= $3 OR lag - coalesce(then_lag, lag) >= $4
		ORDER BY lag DESC, topic, name LIMIT $1`, limit, TroubleLagWindow, TroubleLag, TroubleLagGrowth)
	if err != nil {
		return nil, interpretError("group trouble list", err)
	}
	gs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (GroupTrouble, error) {
		var g GroupTrouble
		err := row.Scan(&g.Topic, &g.Group, &g.Lag, &g.Growth, &g.Since)
		return g, err
	})
	return gs, interpretError("group trouble list", err)
}

// TopicChild is a subscription or consumer group of a topic, as the
// console's overview lists it.
type TopicChild struct {
	TopicID int64
	// QueueID is a subscription's queue (0 for a group).
	QueueID int64
	Name    string
	// Lag is a group's total lag (head minus committed, summed over its
	// partitions).
	Lag int64
}

// TopicChildList returns the subscriptions and the consumer groups of the
// given topics, by topic and name: one probe of each topic's
// subscriptions and groups, and of each group's partitions.
func TopicChildList(ctx context.Context, db DBTX, topicIDs []int64) (subs, groups []TopicChild, err error) {
	rows, err := db.Query(ctx, `/* ferry:topic_child_list */
		SELECT t.id, q.id, q.name, 0::bigint FROM unnest($1::bigint[]) AS t(id)
		JOIN ferry.queues q ON q.topic_id = t.id
		UNION ALL
		SELECT t.id, 0, g.name, coalesce((
			SELECT sum(greatest(`+partitionNextSQL("tp")+` - 1 - `+groupCommittedSQL("gp")+`, 0))::bigint
			FROM ferry.group_partitions gp JOIN ferry.topic_partitions tp ON tp.topic_id = t.id AND tp.partition = gp.partition
			WHERE gp.group_id = g.id), 0)
		FROM unnest($1::bigint[]) AS t(id) JOIN ferry.consumer_groups g ON g.topic_id = t.id
		ORDER BY 1, 3`, topicIDs)
	if err != nil {
		return nil, nil, interpretError("topic child list", err)
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TopicChild, error) {
		var c TopicChild
		err := row.Scan(&c.TopicID, &c.QueueID, &c.Name, &c.Lag)
		return c, err
	})
	if err != nil {
		return nil, nil, interpretError("topic child list", err)
	}
	for _, c := range all {
		if c.QueueID != 0 {
			subs = append(subs, c)
		} else {
			groups = append(groups, c)
		}
	}
	return subs, groups, nil
}
