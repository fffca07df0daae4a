package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// What the console's overview reads (package handlers/console): names
// found by a part of them, and the queues and subscriptions that need
// attention. Neither is a hot path; each is bounded by the number of
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

// Trouble is a queue or subscription that needs attention: it has dead
// letters, or its push delivery is disabled.
type Trouble struct {
	// Topic is the subscription's topic; "" for a queue.
	Topic, Name  string
	DeadLetters  int64
	PushDisabled bool
}

// TroubleList returns up to limit queues and subscriptions with dead
// letters (most first) or disabled push. It reads the trigger-kept
// counters (a few rows per queue), not the dead letters themselves.
func TroubleList(ctx context.Context, db DBTX, limit int) ([]Trouble, error) {
	rows, err := db.Query(ctx, `/* ferry:trouble_list */
		SELECT coalesce(t.name, ''), q.name, coalesce(d.n, 0), q.push_disabled_at IS NOT NULL
		FROM ferry.queues q
		LEFT JOIN ferry.topics t ON t.id = q.topic_id
		LEFT JOIN (
			SELECT queue_id, sum(dead_letters)::bigint AS n FROM ferry.queue_counts
			GROUP BY queue_id HAVING sum(dead_letters) > 0
		) d ON d.queue_id = q.id
		WHERE d.n IS NOT NULL OR q.push_disabled_at IS NOT NULL
		ORDER BY q.push_disabled_at IS NULL, d.n DESC NULLS LAST, t.name NULLS FIRST, q.name
		LIMIT $1`, limit)
	if err != nil {
		return nil, interpretError("trouble list", err)
	}
	ts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Trouble, error) {
		var t Trouble
		err := row.Scan(&t.Topic, &t.Name, &t.DeadLetters, &t.PushDisabled)
		return t, err
	})
	return ts, interpretError("trouble list", err)
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
			SELECT sum(greatest(tp.next_offset - 1 - gp.committed_offset, 0))::bigint
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
