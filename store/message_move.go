package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// MoveParams is a move of available messages from one queue to another
// (POST /v1/queues/{queue}/messages/move, the SQS message move task).
type MoveParams struct {
	From, To int64
	// Limit bounds how many messages move.
	Limit int
	// Origin, when set, moves only the messages dead-lettered from the
	// queue of that name (their ferry:dead_letter_source attribute):
	// SQS's move back to each message's own source.
	Origin string
}

// MessageMove moves up to p.Limit available messages of queue p.From
// into queue p.To, in send order, and reports how many moved. Each moves
// with its id, body, attributes (less the ferry:dead_letter_* and
// ferry:last_error ones a dead-lettering added), group, dedup_id and
// sent_at, as a new available message: receive_count 0, visible now, behind
// the live messages of its group in p.To. Like a dead-lettering, a move
// is not a send: neither queue's dedup window nor p.To's max_depth
// applies. Messages in flight, delayed, or waiting behind their group's
// head stay; how it walks and in what transactions is in the package doc
// (# Dead letters).
func MessageMove(ctx context.Context, db TxBeginner, p MoveParams) (moved int, promoted bool, err error) {
	var fence int64
	if err := db.QueryRow(ctx, `SELECT last_value FROM ferry.message_id_seq`).Scan(&fence); err != nil {
		return 0, false, interpretError("message move", err)
	}
	after := int64(0)
	for moved < p.Limit {
		var (
			n      int
			walked int64
			pr     bool
		)
		err := retry(ctx, func() error {
			return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) (err error) {
				if err := ringProbes(ctx, tx); err != nil {
					return err
				}
				n, walked, pr, err = moveBatchOf(ctx, tx, p, after, fence, min(p.Limit-moved, moveBatch))
				return err
			})
		})
		moved += n
		promoted = promoted || pr
		if err != nil {
			return moved, promoted, interpretError("message move", err)
		}
		if walked == 0 {
			break
		}
		after = walked
	}
	return moved, promoted, nil
}

// moveBatch bounds the messages, and so the group locks, of one move
// transaction.
const moveBatch = maxGroupLocks

// moveWalked is a message a move batch walked past.
type moveWalked struct {
	id        int64
	grp       *string
	waiting   bool
	available bool
}

// moveBatchOf moves, in tx, up to limit available messages of p.From with
// ids after the given one and up to fence. It reports how many moved, the
// last id it walked (0: none left) and whether it promoted the next
// message of a group in p.From.
func moveBatchOf(ctx context.Context, tx pgx.Tx, p MoveParams, after, fence int64, limit int) (int, int64, bool, error) {
	// The queues' locks, shared (as sends take them: no purge or delete of
	// either is under way), in id order.
	if _, err := tx.Exec(ctx, `/* ferry:message_move_queue_lock */
		SELECT count(pg_advisory_xact_lock_shared(ferry.queue_lock_key(q))) FROM (SELECT unnest($1::bigint[]) AS q ORDER BY 1) l`,
		[]int64{p.From, p.To}); err != nil {
		return 0, 0, false, err
	}
	rows, err := tx.Query(ctx, `/* ferry:message_move_walk */
		WITH RECURSIVE `+walkKeys("messages", "id", "$2::bigint", "AND x.id <= $3", ", x.grp, x.waiting, x.visible_at, x.attributes")+`
		SELECT id, grp, waiting, NOT waiting AND visible_at <= clock_timestamp(),
			$5 = '' OR attributes->>'ferry:dead_letter_source' IS NOT DISTINCT FROM $5 FROM walk LIMIT $4`,
		p.From, after, fence, limit, p.Origin)
	if err != nil {
		return 0, 0, false, err
	}
	walked, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (w moveWalked, err error) {
		var ours bool
		err = r.Scan(&w.id, &w.grp, &w.waiting, &w.available, &ours)
		// A message of another origin is passed over as if unavailable
		// (behind it, its group's next one waits).
		w.available = w.available && ours
		w.waiting = w.waiting && ours
		return w, err
	})
	if err != nil || len(walked) == 0 {
		return 0, 0, false, err
	}
	ids, groups := moveCandidates(walked)
	last := walked[len(walked)-1].id
	if len(ids) == 0 {
		return 0, last, false, nil
	}
	if len(groups) > 0 {
		// The groups' locks in both queues, in key order, before any row lock.
		if _, err := tx.Exec(ctx, `/* ferry:message_move_group_lock */
			SELECT count(pg_advisory_xact_lock(k)) FROM (
				SELECT DISTINCT ferry.group_lock_key(q, g) AS k FROM unnest($1::text[]) AS g, unnest($2::bigint[]) AS q ORDER BY k
			) locks`, groups, []int64{p.From, p.To}); err != nil {
			return 0, 0, false, err
		}
	}
	var (
		n        int
		promoted int64
	)
	err = tx.QueryRow(ctx, moveStatement, p.From, ids, p.To).Scan(&n, &promoted)
	return n, last, promoted > 0, err
}

// moveCandidates picks, from the rows a batch walked (in id order), the
// ones to move: the available ones, and the waiting ones of a group whose
// head is among those; and the groups they belong to.
func moveCandidates(walked []moveWalked) ([]int64, []string) {
	var (
		ids    []int64
		groups []string
		heads  = map[string]bool{}
	)
	for _, w := range walked {
		switch {
		case w.available && w.grp != nil:
			heads[*w.grp] = true
			groups = append(groups, *w.grp)
		case w.waiting && w.grp != nil && heads[*w.grp]:
		case !w.available:
			continue
		}
		ids = append(ids, w.id)
	}
	return ids, groups
}

// moveStatement moves messages $2 of queue $1 into queue $3 (see
// [MessageMove]): each is found by one primary-key probe and locked
// (skipped if another transaction holds it: a claim), checked again under
// the lock, deleted by its key and inserted into $3, behind the live
// messages of its group there (one probe per group); the next message of
// a group whose head left is promoted in $1. Returns how many moved and
// how many it promoted.
const moveStatement = `/* ferry:message_move */
	WITH cand AS MATERIALIZED (
		SELECT m.queue_id, m.id, m.grp, m.waiting FROM unnest($2::bigint[]) AS r(id)
		CROSS JOIN LATERAL (
			SELECT x.queue_id, x.id, x.grp, x.waiting, x.visible_at FROM ferry.messages x
			WHERE x.queue_id = $1 AND x.id = r.id LIMIT 1
			FOR UPDATE SKIP LOCKED
		) m
		WHERE m.waiting OR m.visible_at <= clock_timestamp()
		LIMIT cardinality($2::bigint[])
	),
	heads AS (
		SELECT DISTINCT grp FROM cand WHERE NOT waiting AND grp IS NOT NULL
	),
	gone AS (
		DELETE FROM ferry.messages m USING cand c
		WHERE m.queue_id = c.queue_id AND m.id = c.id AND (NOT c.waiting OR c.grp IN (SELECT grp FROM heads))
		RETURNING m.*
	),
	busy AS (
		SELECT g.grp FROM (SELECT DISTINCT grp FROM gone WHERE grp IS NOT NULL) g
		CROSS JOIN LATERAL (
			SELECT true FROM ferry.messages x WHERE x.queue_id = $3 AND x.grp = g.grp LIMIT 1
		) live
	),
	moved AS (
		INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, sent_at, grp, dedup_id, last_error, attributes, body)
		SELECT $3, id, now(),
			grp IS NOT NULL AND (row_number() OVER (PARTITION BY grp ORDER BY id) > 1 OR grp IN (SELECT grp FROM busy)),
			sent_at, grp, dedup_id, last_error,
			CASE WHEN attributes::jsonb ?| ` + deadLetterAttrs + `
				THEN nullif(attributes::jsonb - ` + deadLetterAttrs + `, '{}'::jsonb)::json ELSE attributes END,
			body
		FROM gone ORDER BY id
		RETURNING 1
	),
	promoted AS (
		SELECT CASE WHEN count(*) > 0 THEN ferry.message_promote(array_agg(queue_id), array_agg(grp), array_agg(id)) ELSE 0 END AS n
		FROM gone WHERE grp IS NOT NULL
	)
	SELECT (SELECT count(*) FROM moved)::int, (SELECT n FROM promoted)`

// deadLetterAttrs are the reserved attributes a move into a dead-letter
// queue adds (ferry.message_dead_letter_put), which a move takes off.
const deadLetterAttrs = `ARRAY['ferry:dead_letter_source', 'ferry:dead_letter_reason', 'ferry:last_error']`

// DeadLetterSources returns, per queue of queueIDs that has any, the
// names of the queues and subscriptions (topic/subscription) whose
// dead_letter_queue it is, by name.
func DeadLetterSources(ctx context.Context, db DBTX, queueIDs []int64) (map[int64][]string, error) {
	rows, err := db.Query(ctx, `/* ferry:dead_letter_sources */
		SELECT q.dead_letter_queue_id, CASE WHEN q.topic_id IS NULL THEN q.name ELSE t.name || '/' || q.name END AS n
		FROM ferry.queues q LEFT JOIN ferry.topics t ON t.id = q.topic_id
		WHERE q.dead_letter_queue_id = ANY ($1::bigint[]) ORDER BY 1, 2`, queueIDs)
	if err != nil {
		return nil, interpretError("dead letter sources", err)
	}
	out := map[int64][]string{}
	var (
		id int64
		n  string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		out[id] = append(out[id], n)
		return nil
	})
	return out, interpretError("dead letter sources", err)
}
