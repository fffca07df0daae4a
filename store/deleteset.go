package store

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
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
// driving set (see walk.go).
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
		SELECT g, pg_advisory_xact_lock(k) FROM (
			SELECT DISTINCT grp AS g, ferry.group_lock_key($1, grp) AS k
			FROM (` + victims + `) v WHERE grp IS NOT NULL ORDER BY k LIMIT ` + fmt.Sprint(maxGroupLocks) + `
		) s`
	del += `
		WITH target AS MATERIALIZED (
			SELECT m.queue_id, m.id FROM (` + victims + `) v
			CROSS JOIN LATERAL (
				SELECT x.queue_id, x.id FROM ferry.messages x WHERE x.queue_id = $1 AND x.id = v.id LIMIT 1
			) m
			WHERE v.grp IS NULL OR v.grp = ANY(` + groupsParam + `::text[])
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
		SELECT count(*) FROM gone, promoted`
	return lock, del, args
}

// messageDeleteSet deletes, in one transaction, the messages of the set,
// promoting the next message of every group whose head it removes (in the
// DELETE's statement, by ferry.message_promote: migration 000010 explains
// the call, which the engine's ack, nack and dead letter make alike). It
// takes the victims' group locks first, at most maxGroupLocks of them (in
// key order), and then deletes only victims whose group it holds (the set
// may have grown in between); victims of other groups are left to the
// next call. It reports how many it deleted.
//
// The DELETE finds its rows through one primary-key probe per victim,
// joined to the probes on the full key (see messages.go on settle
// statements): joined on (queue_id, id) with a constant queue id, a
// planner that believes the queue is small walks the whole queue per
// victim; joined by ctid, a victim a claim or an extend changed meanwhile
// would be skipped, and the purge would end with it still there.
func messageDeleteSet(ctx context.Context, db TxBeginner, set deleteSet) (int64, error) {
	var n int64
	err := retry(ctx, func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			lock, del, args := set.statements()
			rows, err := tx.Query(ctx, lock, args...)
			if err != nil {
				return err
			}
			groups := []string{}
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
			return tx.QueryRow(ctx, del, append(args, groups, math.MaxInt32)...).Scan(&n)
		})
	})
	return n, err
}
