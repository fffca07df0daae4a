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
