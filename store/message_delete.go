package store

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// deleteSet is a set of messages of one queue for messageDeleteSet: which
// messages (victims), of queue queueID, at most limit of them per
// transaction, and for purgeVictims and seekVictims none after id fence.
type deleteSet struct {
	victims victims
	queueID int64
	limit   int
	fence   int64
}

// victims names the sets of messages messageDeleteSet deletes.
type victims int

const (
	// expiredVictims: the queue's oldest messages sent before its
	// retention, walked in id order (retention).
	expiredVictims victims = iota
	// purgeVictims: the queue's messages up to the fence, walked in id
	// order (purge).
	purgeVictims
	// seekVictims: the subscription's messages up to the fence, read in
	// id order by one index scan (seek).
	seekVictims
)

// statements returns the two statements of messageDeleteSet for the set
// (the group locks, the delete; see there) and the arguments of the lock:
// $1 the queue id, $2 the limit, then the fence where the set has one.
// The delete takes two more: the groups locked, and the bound of its
// driving set (see index_walk.go).
func (d deleteSet) statements() (lock, del string, args []any) {
	var victims string
	args = []any{d.queueID, d.limit}
	switch d.victims {
	case expiredVictims:
		lock, del = `/* ferry:message_delete_set_expired_lock */`, `/* ferry:message_delete_set_expired */`
		victims = `WITH RECURSIVE ` + walkKeys("messages", "id", "0", "", ", x.grp, x.sent_at") + `
			SELECT m.id, m.grp FROM (SELECT * FROM walk LIMIT $2) m, ferry.queues q
			WHERE q.id = $1 AND m.sent_at < now() - q.retention_seconds * interval '1 second'`
	case purgeVictims:
		lock, del = `/* ferry:message_delete_set_purge_lock */`, `/* ferry:message_delete_set_purge */`
		victims = `WITH RECURSIVE ` + walkKeys("messages", "id", "0", "AND x.id <= $3", ", x.grp") + `
			SELECT id, grp FROM walk LIMIT $2`
		args = append(args, d.fence)
	case seekVictims:
		lock, del = `/* ferry:message_delete_set_seek_lock */`, `/* ferry:message_delete_set_seek */`
		victims = `SELECT id, grp FROM ferry.messages WHERE queue_id = $1 AND id <= $3 ORDER BY id LIMIT $2`
		args = append(args, d.fence)
	default:
		panic(fmt.Sprintf("store: unknown victims %d", d.victims))
	}
	groupsParam := fmt.Sprintf("$%d", len(args)+1)
	boundParam := fmt.Sprintf("$%d", len(args)+2)
	lock += `
		SELECT g, pg_try_advisory_xact_lock(k) FROM (
			SELECT DISTINCT grp AS g, ferry.group_lock_key($1, grp) AS k
			FROM (` + victims + `) v WHERE grp IS NOT NULL ORDER BY k LIMIT ` + fmt.Sprint(maxGroupLocks) + `
		) s`
	del += `
		WITH victims AS MATERIALIZED (
			SELECT id, grp FROM (` + victims + `) v WHERE v.grp IS NULL OR v.grp = ANY(` + groupsParam + `::text[])
		),
		target AS MATERIALIZED (
			SELECT m.queue_id, m.id FROM victims v
			CROSS JOIN LATERAL (
				SELECT x.queue_id, x.id FROM ferry.messages x WHERE x.queue_id = $1 AND x.id = v.id LIMIT 1
				FOR UPDATE SKIP LOCKED
			) m
			LIMIT ` + boundParam + `
		),
		gone AS (
			DELETE FROM ferry.messages m USING target t
			WHERE m.queue_id = t.queue_id AND m.id = t.id AND (m.grp IS NULL OR m.grp = ANY(` + groupsParam + `::text[]))
			RETURNING m.queue_id, m.id, m.grp
		),
		promoted AS (
			SELECT CASE WHEN count(*) > 0 THEN ferry.message_promote(array_agg(queue_id), array_agg(grp), array_agg(id)) ELSE 0 END AS n
			FROM gone WHERE grp IS NOT NULL
		)
		SELECT (SELECT count(*) FROM gone),
			coalesce((SELECT v.id FROM victims v WHERE v.id NOT IN (SELECT id FROM target) LIMIT 1), 0)
		FROM promoted`
	return lock, del, args
}

// deleted is what one messageDeleteSet transaction did: how many messages
// it deleted, and what it left because another transaction held it: a
// message whose row was locked (lockedID, 0 for none) and a group whose
// lock was taken (busyGroup, nil for none). Each is one of possibly
// several.
type deleted struct {
	n         int64
	lockedID  int64
	busyGroup *string
}

// blocked reports whether the transaction left something another held.
func (d deleted) blocked() bool { return d.lockedID != 0 || d.busyGroup != nil }

// messageDeleteSet deletes, in one transaction, the messages of the set,
// promoting the next message of every group whose head it removes (in the
// DELETE's statement, by ferry.message_promote: message_settle.sql explains
// the call, which the engine's ack, nack and dead letter make alike). It
// takes the victims' group locks first, at most maxGroupLocks of them (in
// key order), and then deletes only victims whose group it holds (the set
// may have grown in between); victims of other groups are left to the
// next call. It never waits for a lock another transaction holds, and its
// DELETE finds its rows as the settle statements do (package doc, # Locks
// and # Plans).
func messageDeleteSet(ctx context.Context, db TxBeginner, set deleteSet) (deleted, error) {
	var d deleted
	err := retry(ctx, func() error {
		d = deleted{}
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if err := ringPlanner(ctx, tx); err != nil {
				return err
			}
			lock, del, args := set.statements()
			rows, err := tx.Query(ctx, lock, args...)
			if err != nil {
				return err
			}
			groups := []string{}
			for rows.Next() {
				var (
					g   string
					got bool
				)
				if err := rows.Scan(&g, &got); err != nil {
					return err
				}
				if got {
					groups = append(groups, g)
				} else if d.busyGroup == nil {
					d.busyGroup = &g
				}
			}
			if err := rows.Err(); err != nil {
				return err
			}
			return tx.QueryRow(ctx, del, append(args, groups, math.MaxInt32)...).Scan(&d.n, &d.lockedID)
		})
	})
	return d, err
}

// messageDeleteAll deletes the whole set, in as many messageDeleteSet
// transactions as it takes. When one could delete nothing and left what
// another transaction holds, it waits for that holder before the next
// (messageDeleteWait), holding no lock of its own meanwhile.
func messageDeleteAll(ctx context.Context, db TxBeginner, set deleteSet) error {
	for {
		d, err := messageDeleteSet(ctx, db, set)
		if err != nil {
			return err
		}
		if d.n > 0 {
			continue
		}
		if !d.blocked() {
			return nil
		}
		if err := messageDeleteWait(ctx, db, set.queueID, d); err != nil {
			return err
		}
	}
}

// messageDeleteWait waits until the transaction that held what d left has
// ended: it takes the message's row lock, or else the group's lock, in a
// statement of its own (its own implicit transaction, which releases it
// at once), so that while it waits it holds nothing.
func messageDeleteWait(ctx context.Context, db DBTX, queueID int64, d deleted) error {
	var err error
	if d.lockedID != 0 {
		_, err = db.Exec(ctx, `/* ferry:message_delete_wait_row */
			SELECT 1 FROM ferry.messages WHERE queue_id = $1 AND id = $2 FOR UPDATE`, queueID, d.lockedID)
	} else {
		_, err = db.Exec(ctx, `/* ferry:message_delete_wait_group */
			SELECT pg_advisory_xact_lock(ferry.group_lock_key($1, $2))`, queueID, *d.busyGroup)
	}
	// The holder moved the row to another partition of ferry.messages (a
	// claim or an extend: package doc, # Held snapshots), and the lock
	// then fails with serialization_failure once it ends: what was waited
	// for.
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "40001" {
		return nil
	}
	return err
}

// freshBatch copies b's statements into a new batch, for each attempt of a
// retry: pgx keeps the prepared statement a queued query was sent as in
// the batch, and a batch sent again (on another connection, or after the
// failure made pgx drop its statements) names a statement that does not
// exist there (SQLSTATE 26000), so the retry failed every time.
func freshBatch(b *pgx.Batch) *pgx.Batch {
	nb := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, len(b.QueuedQueries))}
	for i, q := range b.QueuedQueries {
		nb.QueuedQueries[i] = &pgx.QueuedQuery{SQL: q.SQL, Arguments: q.Arguments, Fn: q.Fn}
	}
	return nb
}

// MessagePurge deletes every message the queue holds when it starts
// (available, delayed and in flight; their receipts go stale). It waits for
// sends in progress and notes the newest id, then deletes up to that id in
// bounded batches, each its own short transaction, so a purge of millions
// neither holds a lock for long nor stalls sends to other queues. Messages
// sent meanwhile are kept; a group whose head is purged gets its next
// message promoted. A message another transaction holds (received in an
// application's transaction through the SQL API, or whose group's lock
// it holds) is deleted once that transaction ends: the purge returns only
// then, and waits for it holding no lock (messageDeleteAll), so it cannot
// deadlock with it.
func MessagePurge(ctx context.Context, db TxBeginner, queueID int64) error {
	return messagePurge(ctx, db, queueID, purgeBatch)
}

func messagePurge(ctx context.Context, db TxBeginner, queueID int64, batch int) error {
	b := &pgx.Batch{}
	b.Queue(ringPlannerSQL)
	b.Queue(`/* ferry:message_purge_lock */ SELECT pg_advisory_xact_lock(ferry.queue_lock_key($1))`, queueID)
	b.Queue(`/* ferry:message_purge_fence */
		SELECT coalesce((SELECT id FROM ferry.messages WHERE queue_id = $1 ORDER BY id DESC LIMIT 1), 0)`, queueID)
	var fence int64
	err := func() error {
		br := db.SendBatch(ctx, freshBatch(b))
		defer br.Close()
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if err := br.QueryRow().Scan(&fence); err != nil {
			return err
		}
		return br.Close()
	}()
	if err != nil {
		return interpretError("message purge", err)
	}
	err = messageDeleteAll(ctx, db, deleteSet{victims: purgeVictims, queueID: queueID, limit: batch, fence: fence})
	return interpretError("message purge", err)
}

// purgeBatch bounds the messages one purge transaction deletes.
const purgeBatch = 5000

// maxGroupLocks bounds the group locks one transaction of a batch (purge,
// retention, redrive) takes, so that a few of them at once cannot exhaust
// the server's lock table (max_locks_per_transaction per connection).
const maxGroupLocks = 500
