package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MessageExpire deletes, for every queue, up to limit of its oldest
// messages that are older than its retention, and dead letters that have
// been dead for longer than it, promoting group successors of expired
// heads. It reports how many rows it deleted; whatever a call leaves is
// taken by the next (the retention job runs every minute).
//
// Message ids follow send time, so the oldest messages are found by walking
// the primary key from the start of each queue, and each call reads at most
// limit rows per queue whatever the queue's size.
func MessageExpire(ctx context.Context, db TxBeginner, limit int) (int64, error) {
	rows, err := db.Query(ctx, `SELECT id FROM ferry.queues ORDER BY id`)
	if err != nil {
		return 0, interpretError("message expire", err)
	}
	queueIDs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, interpretError("message expire", err)
	}
	var total int64
	for _, id := range queueIDs {
		n, err := messageExpireQueue(ctx, db, id, limit)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

func messageExpireQueue(ctx context.Context, db TxBeginner, queueID int64, limit int) (int64, error) {
	// Most runs find nothing to do: a look at the queue's oldest messages
	// (ids follow send time, up to the length of a transaction) and its
	// oldest dead letter says so without reading further.
	var due bool
	err := db.QueryRow(ctx, `
		SELECT EXISTS (
			SELECT 1 FROM ferry.queues q,
				LATERAL (SELECT sent_at FROM ferry.messages WHERE queue_id = $1 ORDER BY id LIMIT 100) m
			WHERE q.id = $1 AND m.sent_at < now() - q.retention_seconds * interval '1 second'
		) OR EXISTS (
			SELECT 1 FROM ferry.queues q,
				LATERAL (SELECT dead_lettered_at FROM ferry.dead_letters WHERE queue_id = $1 ORDER BY dead_lettered_at LIMIT 1) d
			WHERE q.id = $1 AND d.dead_lettered_at < now() - q.retention_seconds * interval '1 second'
		)`, queueID).Scan(&due)
	if err != nil || !due {
		return 0, interpretError("message expire", err)
	}
	n, err := messageDeleteSet(ctx, db, `
		SELECT m.id, m.grp FROM (
			SELECT id, grp, sent_at FROM ferry.messages WHERE queue_id = $1 ORDER BY id LIMIT $2
		) m, ferry.queues q
		WHERE q.id = $1 AND m.sent_at < now() - q.retention_seconds * interval '1 second'`,
		queueID, limit)
	if err != nil {
		return n, interpretError("message expire", err)
	}
	tag, err := db.Exec(ctx, `
		DELETE FROM ferry.dead_letters WHERE queue_id = $1 AND id IN (
			SELECT d.id FROM ferry.dead_letters d, ferry.queues q
			WHERE d.queue_id = $1 AND q.id = $1
				AND d.dead_lettered_at < now() - q.retention_seconds * interval '1 second'
			ORDER BY d.dead_lettered_at LIMIT $2)`, queueID, limit)
	return n + tag.RowsAffected(), interpretError("message expire", err)
}

// messageDeleteSet deletes, in one transaction, the messages of queue
// args[0] that the victims query selects (columns id, grp; $1 is the queue
// id, $2... the rest of args), promoting the next message of every group
// whose head it removes. It takes the victims' group locks first and then
// deletes only victims whose group it holds (the set may have grown in
// between). It reports how many it deleted.
func messageDeleteSet(ctx context.Context, db TxBeginner, victims string, args ...any) (int64, error) {
	groupsParam := fmt.Sprintf("$%d", len(args)+1)
	var n int64
	err := retry(ctx, func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `
				SELECT g, pg_advisory_xact_lock(k) FROM (
					SELECT DISTINCT grp AS g, ferry.group_lock_key($1, grp) AS k
					FROM (`+victims+`) v WHERE grp IS NOT NULL ORDER BY k
				) s`, args...)
			if err != nil {
				return err
			}
			var groups []string
			for rows.Next() {
				var (
					g string
					v any
				)
				if err := rows.Scan(&g, &v); err != nil {
					return err
				}
				groups = append(groups, g)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `
				WITH gone AS (
					DELETE FROM ferry.messages m USING (`+victims+`) v
					WHERE m.queue_id = $1 AND m.id = v.id AND (m.grp IS NULL OR m.grp = ANY(`+groupsParam+`))
					RETURNING m.id, m.grp
				),`+promoteAfter+`
				SELECT count(*) FROM gone`, append(args, groups)...).Scan(&n)
		})
	})
	return n, err
}

// DedupExpire deletes up to limit dedup ids whose window has ended.
func DedupExpire(ctx context.Context, db DBTX, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM ferry.dedup WHERE ctid = ANY(ARRAY(
			SELECT ctid FROM ferry.dedup WHERE expires_at < now() ORDER BY expires_at LIMIT $1))`, limit)
	if err != nil {
		return 0, interpretError("dedup expire", err)
	}
	return tag.RowsAffected(), nil
}

// QueueOrphans returns ids that have content but no queue (deleted queues
// whose cleanup has not finished), up to limit.
func QueueOrphans(ctx context.Context, db DBTX, limit int) ([]int64, error) {
	rows, err := db.Query(ctx, `
		SELECT DISTINCT c.queue_id FROM ferry.queue_counts c
		WHERE NOT EXISTS (SELECT 1 FROM ferry.queues q WHERE q.id = c.queue_id) LIMIT $1`, limit)
	if err != nil {
		return nil, interpretError("queue orphans", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return ids, interpretError("queue orphans", err)
}
