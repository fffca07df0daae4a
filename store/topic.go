package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// TopicConfig is a topic's configuration.
type TopicConfig struct {
	Partitions         int
	RetentionSeconds   int
	DedupWindowSeconds int
	// Source is the CloudEvents source of the topic's events published
	// as plain JSON ("": DefaultCloudSource; see Topic.CloudSource).
	Source string
}

// DefaultTopicConfig is what a new topic gets for every field not given.
func DefaultTopicConfig() TopicConfig {
	return TopicConfig{Partitions: 4, RetentionSeconds: 604800, DedupWindowSeconds: 300}
}

// TopicPatch holds the fields a PUT gives; nil fields keep their value.
type TopicPatch struct {
	Partitions         *int
	RetentionSeconds   *int
	DedupWindowSeconds *int
	Source             *string
}

// Topic is a topic's configuration and identity.
type Topic struct {
	ID        int64
	Name      string
	CreatedAt time.Time
	UpdatedAt time.Time
	TopicConfig
}

// PartitionOffsets describes one partition's log: HeadOffset is the newest
// event's offset (-1 when there never was one), OldestOffset the oldest
// retained (HeadOffset+1 when none is retained).
type PartitionOffsets struct {
	Partition    int
	HeadOffset   int64
	OldestOffset int64
}

const topicColumns = `id, name, created_at, updated_at, partitions, retention_seconds, dedup_window_seconds,
	coalesce(source, '')`

func scanTopic(row pgx.Row) (Topic, error) {
	var t Topic
	err := row.Scan(&t.ID, &t.Name, &t.CreatedAt, &t.UpdatedAt, &t.Partitions, &t.RetentionSeconds, &t.DedupWindowSeconds, &t.Source)
	return t, err
}

// CloudSource is the CloudEvents source of the topic's events published
// as plain JSON: its Source setting, or /ferry/topics/{name}.
func (t Topic) CloudSource() string {
	if t.Source != "" {
		return t.Source
	}
	return DefaultCloudSource(t.Name)
}

// TopicUpsert creates the named topic or changes the given fields of an
// existing one, adding partitions when they grow. It reports whether the
// topic was created.
func TopicUpsert(ctx context.Context, db TxBeginner, name string, patch TopicPatch) (Topic, bool, error) {
	t, created, err := upsert[Topic, TopicConfig]{
		lock: func(ctx context.Context, tx pgx.Tx) (Topic, error) {
			return scanTopic(tx.QueryRow(ctx, `SELECT `+topicColumns+` FROM ferry.topics WHERE name = $1 FOR UPDATE`, name))
		},
		merge: func(existing Topic, created bool) (TopicConfig, error) {
			if created {
				return patch.apply(DefaultTopicConfig(), false)
			}
			return patch.apply(existing.TopicConfig, true)
		},
		same: func(next TopicConfig, existing Topic) bool { return next == existing.TopicConfig },
		write: func(ctx context.Context, tx pgx.Tx, next TopicConfig, created bool) (Topic, error) {
			return topicWrite(ctx, tx, name, next, created)
		},
	}.run(ctx, db)
	if err != nil {
		return Topic{}, false, upsertError("topic upsert", err)
	}
	return t, created, nil
}

// apply returns cfg with the patch applied; partitions of an existing
// topic only grow.
func (p TopicPatch) apply(cfg TopicConfig, exists bool) (TopicConfig, error) {
	if p.Partitions != nil {
		if exists && *p.Partitions < cfg.Partitions {
			return TopicConfig{}, &ShrinkError{From: cfg.Partitions, To: *p.Partitions}
		}
		cfg.Partitions = *p.Partitions
	}
	if p.RetentionSeconds != nil {
		cfg.RetentionSeconds = *p.RetentionSeconds
	}
	if p.DedupWindowSeconds != nil {
		cfg.DedupWindowSeconds = *p.DedupWindowSeconds
	}
	if p.Source != nil {
		cfg.Source = *p.Source
	}
	return cfg, nil
}

// topicWrite inserts or updates the topic's row and adds the partitions
// it lacks.
func topicWrite(ctx context.Context, tx pgx.Tx, name string, cfg TopicConfig, created bool) (Topic, error) {
	t, err := scanTopic(tx.QueryRow(ctx, `
		INSERT INTO ferry.topics AS t (name, partitions, retention_seconds, dedup_window_seconds, source)
		VALUES ($1, $2, $3, $4, nullif($6, ''))
		ON CONFLICT (name) DO UPDATE SET
			partitions = excluded.partitions,
			retention_seconds = excluded.retention_seconds,
			dedup_window_seconds = excluded.dedup_window_seconds,
			source = excluded.source,
			updated_at = now()
		WHERE NOT $5 -- creating, and another request created it first: run again as an update
		RETURNING `+topicColumns, name, cfg.Partitions, cfg.RetentionSeconds, cfg.DedupWindowSeconds, created, cfg.Source))
	if err != nil {
		return Topic{}, createRaced(err)
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO ferry.topic_partitions (topic_id, partition)
		SELECT $1, p FROM generate_series(0, $2 - 1) AS p
		ON CONFLICT DO NOTHING`, t.ID, t.Partitions)
	return t, err
}

// TopicGet returns the named topic.
func TopicGet(ctx context.Context, db DBTX, name string) (Topic, error) {
	t, err := scanTopic(db.QueryRow(ctx, `/* ferry:topic_get */ SELECT `+topicColumns+` FROM ferry.topics WHERE name = $1`, name))
	return t, interpretError("topic get", err)
}

// TopicListParams selects one page of [TopicList].
type TopicListParams = PageParams

// TopicList returns the topics named after p.After, by name, at most
// p.Limit of them, and whether more follow: a keyset page read from the
// unique index on name.
func TopicList(ctx context.Context, db DBTX, p TopicListParams) ([]Topic, bool, error) {
	rows, err := db.Query(ctx, `
		SELECT `+topicColumns+` FROM ferry.topics WHERE name > $1 ORDER BY name LIMIT $2`, p.After, pageLimit(p.Limit))
	return pageCollect(rows, err, "topic list", p.Limit, func(row pgx.CollectableRow) (Topic, error) { return scanTopic(row) })
}

// TopicOffsets returns the head and oldest retained offset of every
// partition of the given topics, keyed by topic id, in partition order.
// Each is one index probe.
func TopicOffsets(ctx context.Context, db DBTX, topicIDs []int64) (map[int64][]PartitionOffsets, error) {
	rows, err := db.Query(ctx, `/* ferry:topic_offsets */
		SELECT p.topic_id, p.partition, `+partitionNextSQL("p")+` - 1,
			coalesce((SELECT e."offset" FROM ferry.events e
				WHERE e.topic_id = p.topic_id AND e.partition = p.partition ORDER BY e."offset" LIMIT 1), `+partitionNextSQL("p")+`)
		FROM ferry.topic_partitions p
		WHERE p.topic_id = ANY($1)
		ORDER BY p.topic_id, p.partition`, topicIDs)
	if err != nil {
		return nil, interpretError("topic offsets", err)
	}
	defer rows.Close()
	out := make(map[int64][]PartitionOffsets, len(topicIDs))
	for rows.Next() {
		var (
			id int64
			o  PartitionOffsets
		)
		if err := rows.Scan(&id, &o.Partition, &o.HeadOffset, &o.OldestOffset); err != nil {
			return nil, interpretError("topic offsets", err)
		}
		out[id] = append(out[id], o)
	}
	return out, interpretError("topic offsets", rows.Err())
}

// TopicDelete deletes the named topic and its subscriptions and returns
// their ids; its events and dedup ids, and the subscriptions' deliveries,
// are removed afterwards in bounded batches by [TopicDeleteContent] and
// [QueueDeleteContent] (scheduled by the caller in the same transaction).
// Publishing holds the topic's partition rows, so the delete waits for
// publishes in progress, and later ones find no topic.
func TopicDelete(ctx context.Context, tx DBTX, name string) (int64, []int64, error) {
	var id int64
	if err := tx.QueryRow(ctx, `SELECT id FROM ferry.topics WHERE name = $1 FOR UPDATE`, name).Scan(&id); err != nil {
		return 0, nil, interpretError("topic delete", err)
	}
	// Taking the partition rows waits for publishes in flight; removing
	// them makes later publishes find nothing to write to. They are locked
	// in partition order, as publishes lock them, and after the topic's
	// row, as subscription changes and TopicUpsert do, or these deadlock.
	_, err := tx.Exec(ctx, `
		DELETE FROM ferry.topic_partitions WHERE topic_id = $1 AND partition IN (
			SELECT partition FROM ferry.topic_partitions WHERE topic_id = $1 ORDER BY partition FOR UPDATE)`, id)
	if err != nil {
		return 0, nil, interpretError("topic delete", err)
	}
	tag, err := tx.Exec(ctx, `DELETE FROM ferry.topics WHERE id = $1`, id)
	if err != nil {
		return 0, nil, interpretError("topic delete", err)
	}
	if tag.RowsAffected() == 0 { // deleted meanwhile
		return 0, nil, interpretError("topic delete", ErrNotFound)
	}
	// Its consumer groups: a few rows each.
	rows, err := tx.Query(ctx, `DELETE FROM ferry.consumer_groups WHERE topic_id = $1 RETURNING id`, id)
	if err != nil {
		return 0, nil, interpretError("topic delete", err)
	}
	groups, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err == nil {
		err = consumerGroupDeleteRows(ctx, tx, groups)
	}
	if err != nil {
		return 0, nil, interpretError("topic delete", err)
	}
	// After the partitions: no publish is in progress to fan out to them.
	// Each subscription's lock, as a queue delete takes it: no redrive is
	// writing into one (redrives hold it shared).
	rows, err = tx.Query(ctx, `
		DELETE FROM ferry.queues WHERE id IN (
			SELECT id FROM ferry.queues, pg_advisory_xact_lock(ferry.queue_lock_key(id))
			WHERE topic_id = $1 ORDER BY id)
		RETURNING id`, id)
	if err != nil {
		return 0, nil, interpretError("topic delete", err)
	}
	subs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, nil, interpretError("topic delete", err)
	}
	return id, subs, nil
}

// TopicDeleteContent deletes up to limit rows of a deleted topic's events
// and dedup ids, and reports how many; 0 means nothing is left.
func TopicDeleteContent(ctx context.Context, db DBTX, topicID int64, limit int) (int64, error) {
	// Rows found by the primary key in its order, then deleted by ctid
	// (events and dedup rows of a deleted topic change no more): joined
	// on their key, the planner may reach each through a walk of the
	// topic.
	tag, err := db.Exec(ctx, `/* ferry:topic_delete_events */
		DELETE FROM ferry.events e USING (
			SELECT ctid FROM ferry.events WHERE topic_id = $1 ORDER BY topic_id, partition, "offset" LIMIT $2
		) old
		WHERE e.ctid = old.ctid`, topicID, limit)
	if err != nil {
		return 0, interpretError("topic delete content", err)
	}
	n := tag.RowsAffected()
	if n >= int64(limit) {
		return n, nil
	}
	tag, err = db.Exec(ctx, `/* ferry:topic_delete_dedup */
		DELETE FROM ferry.event_dedup d USING (
			SELECT ctid FROM ferry.event_dedup WHERE topic_id = $1 ORDER BY topic_id, event_id LIMIT $2
		) old
		WHERE d.ctid = old.ctid AND d.topic_id = $1`, topicID, limit)
	if err != nil {
		return n, interpretError("topic delete content", err)
	}
	return n + tag.RowsAffected(), nil
}

func consumerGroupDeleteRows(ctx context.Context, tx DBTX, ids []int64) error {
	if _, err := tx.Exec(ctx, `DELETE FROM ferry.group_members WHERE group_id = ANY($1)`, ids); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `
		WITH fetches AS (DELETE FROM ferry.group_fetches WHERE group_id = ANY($1)),
		commits AS (DELETE FROM ferry.group_commits WHERE group_id = ANY($1))
		DELETE FROM ferry.group_partitions WHERE group_id = ANY($1)`, ids)
	return err
}
