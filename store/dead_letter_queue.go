package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Dead letters into another queue: a queue's (or a subscription's)
// dead_letter_queue_id names the queue its dead letters move into
// (ferry.message_dead_letter_queue and message_dead_letter_put,
// store/definitions/message_settle.sql). A queue is set as a target
// under one lock for every such change, so that no two changes can make
// a cycle together; deleting a target clears it on its sources (the
// foreign key's ON DELETE SET NULL), which keep their dead letters again.

// deadLetterQueueChangeKey is the advisory lock every change that sets a
// dead_letter_queue takes before it reads anything: changes that could
// close a cycle run one at a time, each seeing what the others committed.
const deadLetterQueueChangeKey = `hashtextextended('ferry.dead_letter_queues', 0)`

// deadLetterQueueLock takes the lock of dead_letter_queue changes when the
// patch sets one (dlq non-nil and not ""). The upserts take it first,
// before the row they change.
func deadLetterQueueLock(ctx context.Context, tx pgx.Tx, dlq *string) error {
	if dlq == nil || *dlq == "" {
		return nil
	}
	_, err := tx.Exec(ctx, `/* ferry:dead_letter_queue_change_lock */ SELECT pg_advisory_xact_lock(`+deadLetterQueueChangeKey+`)`)
	return err
}

// maxDeadLetterChain bounds the walk that looks for a cycle: the longest
// chain of dead-letter queues Ferry accepts.
const maxDeadLetterChain = 32

// deadLetterQueueSet points the queue (or, isQueue false, the
// subscription) q, just written in tx, at the queue named dlq ("": none),
// and sets q.DeadLetterQueue. The target must be a queue (not a
// subscription), not q itself, and must not lead back to q through its
// own dead_letter_queue (a cycle); each is a [*ValidationError].
// Unchanged, it writes nothing.
func deadLetterQueueSet(ctx context.Context, tx pgx.Tx, q *Queue, dlq string, isQueue bool) error {
	if dlq == q.DeadLetterQueue {
		return nil
	}
	if dlq == "" {
		_, err := tx.Exec(ctx, `UPDATE ferry.queues SET dead_letter_queue_id = NULL WHERE id = $1`, q.ID)
		q.DeadLetterQueue = ""
		return err
	}
	if isQueue && dlq == q.Name {
		return &ValidationError{Field: "dead_letter_queue", Message: "must not be the queue itself"}
	}
	// The chain from the target on, by its dead_letter_queue: a cycle if
	// it comes back to q.
	var (
		chain  []string
		cyclic bool
	)
	err := tx.QueryRow(ctx, `/* ferry:dead_letter_queue_chain */
		WITH RECURSIVE chain(id, name, next, depth) AS (
			SELECT id, name, dead_letter_queue_id, 1 FROM ferry.queues WHERE name = $1 AND topic_id IS NULL
			UNION ALL
			SELECT n.id, n.name, n.dead_letter_queue_id, c.depth + 1 FROM chain c JOIN ferry.queues n ON n.id = c.next
			WHERE c.id <> $2 AND c.depth < $3
		)
		SELECT coalesce(array_agg(name ORDER BY depth), '{}'), coalesce(bool_or(id = $2), false) FROM chain`,
		dlq, q.ID, maxDeadLetterChain).Scan(&chain, &cyclic)
	switch {
	case err != nil:
		return err
	case len(chain) == 0:
		return &ValidationError{Field: "dead_letter_queue", Message: fmt.Sprintf("no queue named %q", dlq)}
	case cyclic:
		return &ValidationError{Field: "dead_letter_queue", Message: fmt.Sprintf(
			"would make a cycle of dead-letter queues: %s → %s", q.Name, strings.Join(chain, " → "))}
	case len(chain) >= maxDeadLetterChain:
		return &ValidationError{Field: "dead_letter_queue", Message: fmt.Sprintf(
			"would make a chain of more than %d dead-letter queues", maxDeadLetterChain)}
	}
	// The target is locked against its delete by the foreign key's check;
	// a delete that committed since the walk is a missing target.
	var target *int64
	err = tx.QueryRow(ctx, `/* ferry:dead_letter_queue_set */
		UPDATE ferry.queues q SET dead_letter_queue_id = (SELECT d.id FROM ferry.queues d WHERE d.name = $2 AND d.topic_id IS NULL)
		WHERE q.id = $1 RETURNING dead_letter_queue_id`, q.ID, dlq).Scan(&target)
	var pgErr *pgconn.PgError
	if (errors.As(err, &pgErr) && pgErr.Code == "23503") || (err == nil && target == nil) {
		return &ValidationError{Field: "dead_letter_queue", Message: fmt.Sprintf("no queue named %q", dlq)}
	}
	if err != nil {
		return err
	}
	q.DeadLetterQueue = dlq
	return nil
}
