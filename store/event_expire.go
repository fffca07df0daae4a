package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// EventExpire deletes, per topic partition, up to limit events older than
// the topic's retention, oldest first, one topic per statement (so no
// statement deletes more than partitions × limit rows), and reports how
// many it deleted. The time index finds them without reading younger
// events.
//
// The topics with anything to expire are found first by one statement
// that looks at the oldest event of each partition, so a sweep that finds
// nothing writes nothing and commits once (DESIGN.md invariant 12).
func EventExpire(ctx context.Context, db DBTX, limit int) (int64, error) {
	rows, err := db.Query(ctx, `/* ferry:event_expire_due */
		SELECT t.id FROM ferry.topics t WHERE `+eventExpireDue+` ORDER BY t.id`)
	if err != nil {
		return 0, interpretError("event expire", err)
	}
	topics, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, interpretError("event expire", err)
	}
	var total int64
	for _, id := range topics {
		// The oldest events of each partition by the time index, and
		// then by ctid (events are never updated): joined on their key,
		// the planner may reach each through an index that walks the
		// partition.
		//
		// Each partition's next_offset is raised past the last offset it
		// deletes, in the same statement (partitionNextSQL: a partition
		// emptied goes on from there, and a publish of an earlier release,
		// which takes its offsets from next_offset, collides with the
		// events left instead of writing below them). The row lock waits
		// for a publish that holds it, whose events this statement's
		// snapshot did not see: they are newer, so the floor stays below
		// them.
		var n int64
		err := db.QueryRow(ctx, `/* ferry:event_expire */
			WITH gone AS (
				DELETE FROM ferry.events e USING (
					SELECT v.ctid
					FROM ferry.topics t
					JOIN ferry.topic_partitions p ON p.topic_id = t.id
					CROSS JOIN LATERAL (
						SELECT ctid FROM ferry.events
						WHERE topic_id = t.id AND partition = p.partition
							AND published_at < now() - t.retention_seconds * interval '1 second'
						ORDER BY published_at LIMIT $2
					) v
					WHERE t.id = $1
				) old
				WHERE e.ctid = old.ctid
				RETURNING e.partition, e."offset"
			),
			last AS (SELECT partition, max("offset") AS hi FROM gone GROUP BY partition),
			raised AS (
				UPDATE ferry.topic_partitions p SET next_offset = l.hi + 1
				FROM last l
				WHERE p.topic_id = $1 AND p.partition = l.partition AND p.next_offset < l.hi + 1
			)
			SELECT count(*) FROM gone`, id, limit).Scan(&n)
		if err != nil {
			return total, interpretError("event expire", err)
		}
		total += n
	}
	return total, nil
}

// eventExpireDue is true for a topic t whose oldest event in some
// partition is past retention: one probe of the time index per partition.
const eventExpireDue = `EXISTS (
			SELECT 1 FROM ferry.topic_partitions p
			CROSS JOIN LATERAL (
				SELECT e.published_at FROM ferry.events e
				WHERE e.topic_id = p.topic_id AND e.partition = p.partition
				ORDER BY e.published_at LIMIT 1
			) e
			WHERE p.topic_id = t.id AND e.published_at < now() - t.retention_seconds * interval '1 second'
		)`

// EventDedupExpire deletes up to limit event ids whose window has ended.
// It skips ids whose rows other transactions hold (a publish taking over
// an expired id holds its row to its commit, and an application's
// transaction may stay open for minutes): the next sweep deletes them if
// they are still expired then.
func EventDedupExpire(ctx context.Context, db DBTX, limit int) (int64, error) {
	// The oldest ids by the expiry index, locked unless another
	// transaction holds them (SKIP LOCKED), each deleted by its ctid in a
	// statement of its own (see ferry.event_dedup_delete).
	var n int64
	err := db.QueryRow(ctx, `/* ferry:event_dedup_expire */
		SELECT count(ferry.event_dedup_delete(ctid, expires_at)) FROM (
			SELECT ctid, expires_at FROM ferry.event_dedup WHERE expires_at < now() ORDER BY expires_at LIMIT $1
			FOR UPDATE SKIP LOCKED
		) old`, limit).Scan(&n)
	if err != nil {
		return 0, interpretError("event dedup expire", err)
	}
	return n, nil
}
