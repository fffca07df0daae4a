package store

import (
	"context"
	"encoding/json"
	"slices"
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
	rows, err := db.Query(ctx, `/* ferry:dead_letter_list */
		WITH RECURSIVE `+walkKeys("dead_letters", "id", "$2::bigint", "",
		", x.body, x.attributes, x.grp, x.dedup_id, x.event_id, x.receive_count, x.last_error, x.sent_at, x.dead_lettered_at")+`
		SELECT id, body::text, attributes::text, grp, dedup_id, event_id, receive_count, last_error, sent_at, dead_lettered_at
		FROM walk LIMIT $3`, queueID, after, limit+1)
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
//
// It moves them in id order, at most redriveBatch per transaction, each
// its own short transaction (taking at most that many group locks, so
// that redrives of many groups at once cannot exhaust the server's lock
// table): every dead letter moves exactly once, and one of a group is
// never back in the queue before an older one of the same group that the
// call moves. A failure leaves the batches already committed moved.
func DeadLetterRedrive(ctx context.Context, db TxBeginner, p RedriveParams) (int, error) {
	n, err := deadLetterRedrive(ctx, db, p)
	return n, interpretError("dead letter redrive", err)
}

func deadLetterRedrive(ctx context.Context, db TxBeginner, p RedriveParams) (int, error) {
	if p.IDs == nil && p.EventIDs == nil {
		total, left := 0, p.Limit
		for left > 0 {
			moved, taken, walked, err := redriveBatchOf(ctx, db, p.QueueID, nil, min(left, redriveBatch))
			total += moved
			if err != nil || walked == 0 {
				return total, err
			}
			// What the walk saw and another redrive moved first is gone
			// from the next walk.
			left -= taken
		}
		return total, nil
	}
	ids := slices.Clone(p.IDs)
	if p.EventIDs != nil {
		var err error
		if ids, err = deadLetterIDsOfEvents(ctx, db, p.QueueID, p.EventIDs); err != nil {
			return 0, err
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	total := 0
	for chunk := range slices.Chunk(ids, redriveBatch) {
		moved, _, _, err := redriveBatchOf(ctx, db, p.QueueID, chunk, 0)
		total += moved
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// redriveBatch bounds the dead letters, and so the group locks, of one
// redrive transaction.
const redriveBatch = maxGroupLocks

// deadLetterIDsOfEvents returns the ids of the queue's dead letters that
// carry the given event ids, one probe of the event index per event id.
func deadLetterIDsOfEvents(ctx context.Context, db DBTX, queueID int64, eventIDs []string) ([]int64, error) {
	rows, err := db.Query(ctx, `/* ferry:dead_letter_ids_of_events */
		SELECT d.id FROM unnest($2::text[]) AS r(event_id)
		CROSS JOIN LATERAL (
			SELECT x.id FROM ferry.dead_letters x WHERE x.queue_id = $1 AND x.event_id = r.event_id
			LIMIT $3
		) d`, queueID, eventIDs, redriveBatch)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// redriveBatchOf moves, in one transaction, the given dead letters (ids,
// ascending), or else the queue's oldest limit. It reports how many moved,
// how many dead letters it took (a dead letter whose event is pending
// again is taken, and dropped, not moved) and how many it looked at (0:
// there are none).
func redriveBatchOf(ctx context.Context, db TxBeginner, queueID int64, ids []int64, limit int) (moved, taken, walked int, err error) {
	err = retry(ctx, func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if err := ringProbes(ctx, tx); err != nil {
				return err
			}
			// The queue's lock (shared, as sends take it: a purge or delete
			// is not under way), the targets, then their groups' locks: a
			// redriven message joins its group behind a head that cannot
			// change.
			if _, err := tx.Exec(ctx, `/* ferry:dead_letter_redrive_queue_lock */ SELECT pg_advisory_xact_lock_shared(ferry.queue_lock_key($1))`, queueID); err != nil {
				return err
			}
			var targets []int64
			var groups []string
			targets, groups, walked, err = redriveTake(ctx, tx, queueID, ids, limit)
			if err != nil || len(targets) == 0 {
				moved, taken = 0, 0
				return err
			}
			b := &pgx.Batch{}
			if len(groups) > 0 {
				b.Queue(lockGroupsNamed, queueID, groups)
			}
			b.Queue(redriveMove, queueID, targets)
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
			moved, taken = int(tag), len(targets)
			return br.Close()
		})
	})
	return moved, taken, walked, err
}

// redriveTake locks the dead letters a redrive batch moves (the given ids,
// or else the oldest limit) and returns their ids and groups, and how many
// ids it looked at.
func redriveTake(ctx context.Context, tx pgx.Tx, queueID int64, ids []int64, limit int) ([]int64, []string, int, error) {
	var (
		rows pgx.Rows
		err  error
	)
	if ids != nil {
		// One primary-key probe per id, locked in id order.
		rows, err = tx.Query(ctx, `/* ferry:dead_letter_redrive_take */
			SELECT r.id, d.id, d.grp FROM unnest($2::bigint[]) WITH ORDINALITY AS r(id, ord)
			LEFT JOIN LATERAL (
				SELECT x.id, x.grp FROM ferry.dead_letters x WHERE x.queue_id = $1 AND x.id = r.id LIMIT 1
				FOR UPDATE
			) d ON true
			ORDER BY r.ord`, queueID, ids)
	} else {
		// The oldest, walked in id order and locked one by one: a dead
		// letter another redrive holds is waited for, and skipped once
		// that one has moved it.
		rows, err = tx.Query(ctx, `/* ferry:dead_letter_redrive_take_oldest */
			WITH RECURSIVE `+walkKeys("dead_letters", "id", "0", "", "")+`
			SELECT w.id, d.id, d.grp FROM (SELECT id FROM walk LIMIT $2) w
			LEFT JOIN LATERAL (
				SELECT x.id, x.grp FROM ferry.dead_letters x WHERE x.queue_id = $1 AND x.id = w.id LIMIT 1
				FOR UPDATE
			) d ON true
			ORDER BY w.id`, queueID, limit)
	}
	if err != nil {
		return nil, nil, 0, err
	}
	var (
		taken  []int64
		groups []string
		walked int
	)
	for rows.Next() {
		var (
			k   int64
			id  *int64
			grp *string
		)
		if err := rows.Scan(&k, &id, &grp); err != nil {
			return nil, nil, 0, err
		}
		walked++
		if id == nil {
			continue // moved by another redrive meanwhile
		}
		taken = append(taken, *id)
		if grp != nil {
			groups = append(groups, *grp)
		}
	}
	return taken, groups, walked, rows.Err()
}

// redriveMove moves the locked dead letters $2 of queue $1 back into the
// queue. Each is found by one primary-key probe, deleted by ctid, and
// checked against the live messages with probes (LATERAL ... LIMIT 1,
// which no plan turns into a scan of the queue).
const redriveMove = `/* ferry:dead_letter_redrive */
	WITH target AS MATERIALIZED (
		SELECT d.ctid FROM unnest($2::bigint[]) AS r(id)
		CROSS JOIN LATERAL (
			SELECT x.ctid FROM ferry.dead_letters x WHERE x.queue_id = $1 AND x.id = r.id LIMIT 1
		) d
		LIMIT cardinality($2::bigint[])
	),
	gone AS (
		DELETE FROM ferry.dead_letters d USING target t WHERE d.ctid = t.ctid RETURNING d.*
	),
	-- A subscription's event may be pending again (after a seek): that
	-- delivery stands for the dead letter. It is left out before heads
	-- are chosen, so a group never gets a head that is not written.
	-- (Seeks take the queue's lock exclusively; no other writer adds an
	-- old event.)
	kept AS (
		SELECT g.* FROM gone g
		LEFT JOIN LATERAL (
			SELECT true AS found FROM ferry.messages x
			WHERE x.queue_id = g.queue_id AND x.event_partition = g.event_partition AND x.event_offset = g.event_offset
			LIMIT 1
		) pending ON g.event_offset IS NOT NULL
		-- And one by id: ferry.messages' primary key holds part, so ON
		-- CONFLICT no longer sees an id the queue holds in another
		-- partition.
		LEFT JOIN LATERAL (
			SELECT true AS found FROM ferry.messages x WHERE x.queue_id = g.queue_id AND x.id = g.id LIMIT 1
		) held ON true
		WHERE pending.found IS NULL AND held.found IS NULL
	),
	-- The groups that already have live messages: the redriven ones wait
	-- behind them.
	busy AS (
		SELECT g.grp FROM (SELECT DISTINCT queue_id, grp FROM kept WHERE grp IS NOT NULL) g
		CROSS JOIN LATERAL (
			SELECT true FROM ferry.messages x WHERE x.queue_id = g.queue_id AND x.grp = g.grp LIMIT 1
		) live
	)
	INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, sent_at, grp, dedup_id, event_id, event_partition, event_offset, last_error, attributes, body)
	SELECT queue_id, id, now(),
		grp IS NOT NULL AND (
			row_number() OVER (PARTITION BY grp ORDER BY id) > 1
			OR grp IN (SELECT grp FROM busy)),
		sent_at, grp, dedup_id, event_id, event_partition, event_offset, last_error, attributes, body
	FROM kept
	ON CONFLICT DO NOTHING`

// DeadLetterPurge deletes every dead letter the queue holds when it
// starts, in bounded batches, each its own short transaction.
func DeadLetterPurge(ctx context.Context, db DBTX, queueID int64) error {
	return deadLetterPurge(ctx, db, queueID, purgeBatch)
}

func deadLetterPurge(ctx context.Context, db DBTX, queueID int64, batch int) error {
	// The newest message id when the purge starts: dead letters of later
	// messages are not the purge's (without a fence, a queue
	// dead-lettering fast could keep it going for ever).
	var fence int64
	if err := db.QueryRow(ctx, `SELECT last_value FROM ferry.message_id_seq`).Scan(&fence); err != nil {
		return interpretError("dead letter purge", err)
	}
	for {
		tag, err := db.Exec(ctx, `/* ferry:dead_letter_purge */
			WITH RECURSIVE `+walkKeys("dead_letters", "id", "0", "AND x.id <= $3", ", x.ctid")+`,
			victims AS MATERIALIZED (SELECT ctid FROM walk LIMIT $2)
			DELETE FROM ferry.dead_letters d USING (SELECT ctid FROM victims LIMIT $2) v WHERE d.ctid = v.ctid`,
			queueID, batch, fence)
		if err != nil {
			return interpretError("dead letter purge", err)
		}
		if tag.RowsAffected() < int64(batch) {
			return nil
		}
	}
}
