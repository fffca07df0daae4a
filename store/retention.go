package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Expiry is what retention removed from one queue or subscription (a
// subscription is a queue fed by its topic).
type Expiry struct {
	QueueID int64
	// Name is the queue's name, or the subscription's.
	Name string
	// Topic is the subscription's topic; "" for a queue.
	Topic string
	// Messages counts the messages removed (a subscription's pending
	// deliveries), DeadLetters the dead letters.
	Messages, DeadLetters int64
}

// Expired lists what a retention call removed, one [Expiry] per queue or
// subscription that lost rows, in id order.
type Expired []Expiry

// Total is how many rows were removed.
func (e Expired) Total() int64 {
	var n int64
	for _, x := range e {
		n += x.Messages + x.DeadLetters
	}
	return n
}

// MessageExpire deletes, for every queue, up to limit of its oldest
// messages that are older than its retention, and up to limit of its dead
// letters that have been dead for longer than it, promoting group
// successors of expired heads. It reports what it deleted per queue;
// whatever a call leaves is taken by the next (the retention job runs
// every minute). A sweep that finds nothing writes nothing (package doc,
// # Plans).
func MessageExpire(ctx context.Context, db TxBeginner, limit int) (Expired, error) {
	due, err := queuesDueForExpiry(ctx, db)
	if err != nil {
		return nil, interpretError("message expire", err)
	}
	var out Expired
	for _, q := range due {
		x, err := messageExpireQueue(ctx, db, q, limit)
		if x.Messages+x.DeadLetters > 0 {
			out = append(out, x)
		}
		if err != nil {
			return out, interpretError("message expire", err)
		}
	}
	return out, nil
}

// RetentionKeep is how long the retention sweep keeps what it keeps for
// a fixed time, whatever the queue or topic: push attempts and audit log
// entries.
type RetentionKeep struct {
	PushAttempts time.Duration
	Audit        time.Duration
}

// RetentionDue reports whether a retention sweep would find anything to
// delete: a queue's or subscription's message or dead letter, or a
// topic's event, past retention; a dedup id (of a message or an event)
// past its window; a push attempt or an audit log entry kept for longer
// than keep says. It reads the oldest row of each by its index, in one
// transaction, and writes nothing: the periodic sweep asks it first and starts (and writes
// a job row) only when there is work (DESIGN.md invariant 12).
func RetentionDue(ctx context.Context, db TxBeginner, keep RetentionKeep) (bool, error) {
	var due bool
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `/* ferry:retention_due */
			SELECT EXISTS (SELECT 1 FROM ferry.topics t WHERE `+eventExpireDue+`)
				OR coalesce((SELECT min(expires_at) FROM ferry.dedup) < now(), false)
				OR coalesce((SELECT min(expires_at) FROM ferry.event_dedup) < now(), false)
				OR coalesce((SELECT min(at) FROM ferry.push_attempts) < now() - $1 * interval '1 millisecond', false)
				OR coalesce((SELECT min(at) FROM ferry.audit_log) < now() - $2 * interval '1 millisecond', false)`,
			keep.PushAttempts.Milliseconds(), keep.Audit.Milliseconds()).Scan(&due)
		if err != nil || due {
			return err
		}
		queues, err := queuesDueIn(ctx, tx)
		due = len(queues) > 0
		return err
	})
	if err != nil {
		return false, interpretError("retention due", err)
	}
	return due, nil
}

// queuesDueForExpiry returns the queues and subscriptions whose oldest
// messages or dead letters are past retention, with their names: one
// transaction, one round trip for the checks (a batch).
func queuesDueForExpiry(ctx context.Context, db TxBeginner) ([]Expiry, error) {
	var due []Expiry
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// The due check walks ferry.messages by id: planned as the ring's
		// other walks are, or a partition believed empty is appended whole
		// and sorted (index_walk.go, ringPlannerSQL).
		if err := ringPlanner(ctx, tx); err != nil {
			return err
		}
		var err error
		due, err = queuesDueIn(ctx, tx)
		return err
	})
	return due, err
}

// messageExpireDue is the statement that says whether queue $1 has
// anything to expire: a look at its oldest messages (ids follow send time,
// up to the length of a transaction) and its oldest dead letter says so
// without reading further.
func messageExpireDue() string {
	return `/* ferry:message_expire_due */
		WITH RECURSIVE ` + walkKeys("messages", "id", "0", "", ", x.sent_at") + `
		SELECT EXISTS (
			SELECT 1 FROM ferry.queues q, (SELECT sent_at FROM walk LIMIT 100) m
			WHERE q.id = $1 AND m.sent_at < now() - q.retention_seconds * interval '1 second'
		) OR EXISTS (
			SELECT 1 FROM ferry.queues q,
				LATERAL (SELECT dead_lettered_at FROM ferry.dead_letters WHERE queue_id = $1 ORDER BY dead_lettered_at LIMIT 1) d
			WHERE q.id = $1 AND d.dead_lettered_at < now() - q.retention_seconds * interval '1 second'
		)`
}

// queuesDueIn is queuesDueForExpiry in tx.
func queuesDueIn(ctx context.Context, tx pgx.Tx) ([]Expiry, error) {
	rows, err := tx.Query(ctx, `/* ferry:queue_ids */
		SELECT q.id, q.name, coalesce(t.name, '') FROM ferry.queues q
		LEFT JOIN ferry.topics t ON t.id = q.topic_id ORDER BY q.id`)
	if err != nil {
		return nil, err
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Expiry, error) {
		var x Expiry
		return x, r.Scan(&x.QueueID, &x.Name, &x.Topic)
	})
	if err != nil || len(all) == 0 {
		return nil, err
	}
	b := &pgx.Batch{}
	check := messageExpireDue()
	for _, q := range all {
		b.Queue(check, q.QueueID)
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	var due []Expiry
	for _, q := range all {
		var d bool
		if err := br.QueryRow().Scan(&d); err != nil {
			return nil, err
		}
		if d {
			due = append(due, q)
		}
	}
	return due, br.Close()
}

// messageExpireQueue expires one due queue's oldest messages and dead
// letters, counting them in x.
func messageExpireQueue(ctx context.Context, db TxBeginner, x Expiry, limit int) (Expiry, error) {
	// Messages that other transactions hold (an application's
	// transaction that received them through the SQL API, a group lock)
	// are left to the next sweep: it does not wait for them.
	d, err := messageDeleteSet(ctx, db, deleteSet{victims: expiredVictims, queueID: x.QueueID, limit: limit})
	x.Messages = d.n
	if err != nil {
		return x, err
	}
	// The oldest dead letters: the age index walked one dead_lettered_at at
	// a time, each value's rows read by their own probe, and deleted by
	// the ctid the probe saw.
	tag, err := db.Exec(ctx, `/* ferry:dead_letter_expire */
		WITH RECURSIVE `+walkValues("dead_letters", "dead_lettered_at", "x.queue_id = $1 AND",
		"(SELECT now() - q.retention_seconds * interval '1 second' FROM ferry.queues q WHERE q.id = $1)")+`,
		victims AS MATERIALIZED (
			SELECT d.ctid FROM walk w
			CROSS JOIN LATERAL (
				SELECT x.ctid FROM ferry.dead_letters x WHERE x.queue_id = $1 AND x.dead_lettered_at = w.v LIMIT $2
			) d
			LIMIT $2
		)
		DELETE FROM ferry.dead_letters d USING (SELECT ctid FROM victims LIMIT $2) v WHERE d.ctid = v.ctid`, x.QueueID, limit)
	x.DeadLetters = tag.RowsAffected()
	return x, err
}

// DedupExpire deletes up to limit dedup ids whose window has ended. It
// skips ids whose rows other transactions hold (a send taking over an
// expired id holds its row to its commit, and an application's
// transaction may stay open for minutes): the next sweep deletes them if
// they are still expired then.
func DedupExpire(ctx context.Context, db DBTX, limit int) (int64, error) {
	// Found in expiry order, one expires_at at a time (walkValues), each
	// value's rows by their own probe, locked unless another transaction
	// holds them (SKIP LOCKED: the probe then returns the newest version,
	// or nothing if it has a new window), and deleted by the ctid the probe
	// locked, joined (ctid = ANY(ARRAY(...)) lets a plan made while the
	// table was small scan the whole table instead), if still expired.
	tag, err := db.Exec(ctx, `/* ferry:dedup_expire */
		WITH RECURSIVE `+walkValues("dedup", "expires_at", "", "now()")+`,
		victims AS MATERIALIZED (
			SELECT d.ctid FROM walk w
			CROSS JOIN LATERAL (
				SELECT x.ctid FROM ferry.dedup x WHERE x.expires_at = w.v LIMIT $1
				FOR UPDATE SKIP LOCKED
			) d
			LIMIT $1
		)
		DELETE FROM ferry.dedup d USING (SELECT ctid FROM victims LIMIT $1) v
		WHERE d.ctid = v.ctid AND d.expires_at < now()`, limit)
	if err != nil {
		return 0, interpretError("dedup expire", err)
	}
	return tag.RowsAffected(), nil
}

// QueueOrphans returns ids that have content but no queue (deleted queues
// whose cleanup has not finished), up to limit.
//
// The ids with content are those in ferry.queue_counts, which holds up to
// 129 rows a queue (REST's 64 slots, the SQL API's 64, the fold's), and
// one per SQL API transaction not folded yet: they are walked one distinct id at a time (a skip scan
// of its primary key, one probe per queue, orphanPage queues a statement),
// so a sweep costs one probe per queue, however many slots and messages
// the queues have.
func QueueOrphans(ctx context.Context, db DBTX, limit int) ([]int64, error) {
	var (
		orphans []int64
		after   int64
	)
	for len(orphans) < limit {
		rows, err := db.Query(ctx, `/* ferry:queue_orphans */
			WITH RECURSIVE ids AS (
				SELECT (SELECT queue_id FROM ferry.queue_counts WHERE queue_id > $1 ORDER BY queue_id LIMIT 1) AS id, 1 AS n
				UNION ALL
				SELECT (SELECT c.queue_id FROM ferry.queue_counts c WHERE c.queue_id > ids.id ORDER BY c.queue_id LIMIT 1), n + 1
				FROM ids WHERE ids.id IS NOT NULL AND n < $2
			)
			SELECT id, NOT EXISTS (SELECT 1 FROM ferry.queues q WHERE q.id = ids.id) FROM ids WHERE id IS NOT NULL`,
			after, orphanPage)
		if err != nil {
			return nil, interpretError("queue orphans", err)
		}
		seen := 0
		for rows.Next() {
			var (
				id     int64
				orphan bool
			)
			if err := rows.Scan(&id, &orphan); err != nil {
				rows.Close()
				return nil, interpretError("queue orphans", err)
			}
			seen++
			after = id
			if orphan && len(orphans) < limit {
				orphans = append(orphans, id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, interpretError("queue orphans", err)
		}
		if seen < orphanPage {
			break
		}
	}
	return orphans, nil
}

// orphanPage is how many queues one statement of QueueOrphans looks at.
const orphanPage = 1000
