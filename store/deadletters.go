package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeadLetter is a message that was dead-lettered.
type DeadLetter struct {
	ID             int64
	Body           json.RawMessage
	Attributes     json.RawMessage
	Group          *string
	DedupID        *string
	EventID        *string // a subscription's delivery: the event's id
	ReceiveCount   int
	LastError      *string
	SentAt         time.Time
	DeadLetteredAt time.Time
}

// DeadLetterList returns up to limit dead letters of the queue with ids
// after the given one, in send order, and whether more follow.
func DeadLetterList(ctx context.Context, db DBTX, queueID, after int64, limit int) ([]DeadLetter, bool, error) {
	rows, err := db.Query(ctx, `
		SELECT id, body::text, attributes::text, grp, dedup_id, event_id, receive_count, last_error, sent_at, dead_lettered_at
		FROM ferry.dead_letters WHERE queue_id = $1 AND id > $2 ORDER BY id LIMIT $3`, queueID, after, limit+1)
	if err != nil {
		return nil, false, interpretError("dead letter list", err)
	}
	dls, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) {
		var (
			d           DeadLetter
			body, attrs *string
		)
		err := row.Scan(&d.ID, &body, &attrs, &d.Group, &d.DedupID, &d.EventID, &d.ReceiveCount, &d.LastError, &d.SentAt, &d.DeadLetteredAt)
		d.Body = json.RawMessage(*body)
		if attrs != nil {
			d.Attributes = json.RawMessage(*attrs)
		}
		return d, err
	})
	if err != nil {
		return nil, false, interpretError("dead letter list", err)
	}
	more := len(dls) > limit
	if more {
		dls = dls[:limit]
	}
	return dls, more, nil
}

// RedriveParams selects the dead letters to redrive: the given ids, or else
// the oldest Limit.
type RedriveParams struct {
	QueueID int64
	IDs     []int64
	// EventIDs, for a subscription, selects dead letters by event id.
	EventIDs []string
	Limit    int
}

// DeadLetterRedrive moves dead letters back into the queue with
// receive_count 0 and their original ids, so they keep their send order
// (also within their groups), and reports how many moved. Ids that name no
// dead letter are ignored.
func DeadLetterRedrive(ctx context.Context, db TxBeginner, p RedriveParams) (int, error) {
	var n int
	err := retry(ctx, func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			// The queue's lock (shared, as sends take it: a purge or delete
			// is not under way), the targets, then their groups' locks: a
			// redriven message joins its group behind a head that cannot
			// change.
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(ferry.queue_lock_key($1))`, p.QueueID); err != nil {
				return err
			}
			var rows pgx.Rows
			var err error
			switch {
			case p.IDs != nil:
				rows, err = tx.Query(ctx, `SELECT id, grp FROM ferry.dead_letters WHERE queue_id = $1 AND id = ANY($2) ORDER BY id FOR UPDATE`, p.QueueID, p.IDs)
			case p.EventIDs != nil:
				rows, err = tx.Query(ctx, `SELECT id, grp FROM ferry.dead_letters WHERE queue_id = $1 AND event_id = ANY($2) ORDER BY id FOR UPDATE`, p.QueueID, p.EventIDs)
			default:
				rows, err = tx.Query(ctx, `SELECT id, grp FROM ferry.dead_letters WHERE queue_id = $1 ORDER BY id LIMIT $2 FOR UPDATE`, p.QueueID, p.Limit)
			}
			if err != nil {
				return err
			}
			var (
				ids    []int64
				groups []string
			)
			for rows.Next() {
				var (
					id  int64
					grp *string
				)
				if err := rows.Scan(&id, &grp); err != nil {
					return err
				}
				ids = append(ids, id)
				if grp != nil {
					groups = append(groups, *grp)
				}
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if len(ids) == 0 {
				n = 0
				return nil
			}
			b := &pgx.Batch{}
			if len(groups) > 0 {
				b.Queue(`
					SELECT count(pg_advisory_xact_lock(k)) FROM (
						SELECT DISTINCT ferry.group_lock_key($1, g) AS k FROM unnest($2::text[]) AS g ORDER BY k
					) locks`, p.QueueID, groups)
			}
			b.Queue(`
				WITH gone AS (
					DELETE FROM ferry.dead_letters WHERE queue_id = $1 AND id = ANY($2) RETURNING *
				),
				-- A subscription's event may be pending again (after a
				-- seek): that delivery stands for the dead letter. It is
				-- left out before heads are chosen, so a group never gets
				-- a head that is not written. (Seeks take the queue's lock
				-- exclusively; no other writer adds an old event.)
				kept AS (
					SELECT * FROM gone g
					WHERE g.event_offset IS NULL OR NOT EXISTS (
						SELECT 1 FROM ferry.messages x
						WHERE x.queue_id = $1 AND x.event_partition = g.event_partition AND x.event_offset = g.event_offset)
				)
				INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, sent_at, grp, dedup_id, event_id, event_partition, event_offset, last_error, attributes, body)
				SELECT queue_id, id, now(),
					grp IS NOT NULL AND (
						row_number() OVER (PARTITION BY grp ORDER BY id) > 1
						OR EXISTS (SELECT 1 FROM ferry.messages x WHERE x.queue_id = $1 AND x.grp = kept.grp)),
					sent_at, grp, dedup_id, event_id, event_partition, event_offset, last_error, attributes, body
				FROM kept
				ON CONFLICT DO NOTHING`, p.QueueID, ids)
			br := tx.SendBatch(ctx, b)
			defer br.Close()
			var tag int64
			for i := range b.Len() {
				ct, err := br.Exec()
				if err != nil {
					return err
				}
				if i == b.Len()-1 {
					tag = ct.RowsAffected()
				}
			}
			n = int(tag)
			return br.Close()
		})
	})
	return n, interpretError("dead letter redrive", err)
}

// DeadLetterPurge deletes every dead letter of the queue.
func DeadLetterPurge(ctx context.Context, db DBTX, queueID int64) error {
	_, err := db.Exec(ctx, `DELETE FROM ferry.dead_letters WHERE queue_id = $1`, queueID)
	return interpretError("dead letter purge", err)
}
