package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SubscriptionSeek moves the subscription to start: every pending
// delivery is removed (in flight ones too; their receipts go stale) and
// the retained events from start that the filter selects are delivered
// again ("latest" delivers nothing: everything so far counts as
// acknowledged). Dead letters stay. It reports how many events it
// delivered. What it holds, and for how long, is in the package doc
// (# Locks).
func SubscriptionSeek(ctx context.Context, pool *pgxpool.Pool, s Subscription, start StartPosition) (int64, error) {
	if s.Ordered {
		n, err := subscriptionSeekLocked(ctx, pool, s, start)
		return n, interpretError("subscription seek", err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, interpretError("subscription seek", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(ferry.queue_lock_key($1))`, s.ID); err != nil {
		return 0, interpretError("subscription seek", err)
	}
	defer func() {
		// Unlock even if ctx ended; if that fails the connection is
		// closed, which releases the lock.
		if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock(ferry.queue_lock_key($1))`, s.ID); err != nil {
			conn.Conn().Close(context.Background())
		}
	}()
	var (
		cur   Subscription
		fence int64
		heads map[int]int64
	)
	err = retry(ctx, func() error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if err := ringPlanner(ctx, tx); err != nil {
				return err
			}
			if err := lockTopicForSubscriptions(ctx, tx, s.TopicID); err != nil {
				return err
			}
			var err error
			cur, err = scanSubscription(tx.QueryRow(ctx, `SELECT `+subscriptionColumns+` FROM ferry.queues q WHERE id = $1`, s.ID))
			if err != nil {
				return err
			}
			// The newest delivery, as the first entry of the primary key
			// backwards: max(id) may be planned as an aggregate over
			// every delivery when the subscription looks small.
			if err := tx.QueryRow(ctx, `/* ferry:subscription_seek_fence */
				SELECT coalesce((SELECT id FROM ferry.messages WHERE queue_id = $1 ORDER BY id DESC LIMIT 1), 0)`, s.ID).Scan(&fence); err != nil {
				return err
			}
			heads, err = partitionHeads(ctx, tx, s.TopicID)
			return err
		})
	})
	if err != nil {
		return 0, interpretError("subscription seek", err)
	}
	if cur.Ordered {
		// Made ordered meanwhile: seek it as such (this session's queue
		// lock lets its own transaction-level lock through).
		n, err := subscriptionSeekLocked(ctx, conn, cur, start)
		return n, interpretError("subscription seek", err)
	}
	if err := messageDeleteAll(ctx, conn, deleteSet{victims: seekVictims, queueID: s.ID, limit: purgeBatch, fence: fence}); err != nil {
		return 0, interpretError("subscription seek", err)
	}
	if !start.Earliest && start.Time == nil {
		return 0, nil
	}
	n, err := subscriptionBackfillBatches(ctx, conn, cur, start, heads)
	return n, interpretError("subscription seek", err)
}

// subscriptionSeekLocked seeks in one transaction under the topic's
// partition locks (for ordered subscriptions). A delivery whose row
// another transaction holds (an application's, that received it through
// the SQL API) is waited for after that transaction rolled back, holding
// no lock (every publish to the topic would wait for the partitions
// meanwhile), and the seek then starts again.
func subscriptionSeekLocked(ctx context.Context, db TxBeginner, s Subscription, start StartPosition) (int64, error) {
	for {
		var (
			n      int64
			locked int64
		)
		err := retry(ctx, func() error {
			locked = 0
			return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				if err := ringPlanner(ctx, tx); err != nil {
					return err
				}
				var err error
				n, locked, err = subscriptionSeekTx(ctx, tx, s, start)
				if err == nil && locked != 0 {
					err = errSeekBlocked
				}
				return err
			})
		})
		if !errors.Is(err, errSeekBlocked) {
			return n, err
		}
		if err := messageDeleteWait(ctx, db, s.ID, deleted{lockedID: locked}); err != nil {
			return 0, err
		}
	}
}

// errSeekBlocked ends a seek's transaction that met a delivery another
// transaction holds.
var errSeekBlocked = errors.New("a delivery is held by another transaction")

// subscriptionSeekTx is the transaction of subscriptionSeekLocked: the
// topic's and the subscription's locks, the clear and the backfill; or,
// if a delivery's row is held by another transaction, the id of one such
// (and the caller rolls back).
func subscriptionSeekTx(ctx context.Context, tx pgx.Tx, s Subscription, start StartPosition) (n, locked int64, err error) {
	if err := lockTopicForSubscriptions(ctx, tx, s.TopicID); err != nil {
		return 0, 0, err
	}
	// The queue's lock, as a purge takes it: no redrive runs.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(ferry.queue_lock_key($1))`, s.ID); err != nil {
		return 0, 0, err
	}
	// Read again under the locks: the filter in force now.
	cur, err := scanSubscription(tx.QueryRow(ctx,
		`SELECT `+subscriptionColumns+` FROM ferry.queues q WHERE id = $1`, s.ID))
	if err != nil {
		return 0, 0, err
	}
	if locked, err = subscriptionClear(ctx, tx, s.ID); err != nil || locked != 0 {
		return 0, locked, err
	}
	n, err = subscriptionBackfillLocked(ctx, tx, cur, start)
	return n, 0, err
}

// subscriptionClear deletes every delivery of the subscription, in
// batches of purgeBatch by id (each batch starts after the last, so none
// walks over the rows the batches before it deleted), within tx: the
// caller holds the topic's partition locks and the subscription's queue
// lock, so nothing is added meanwhile and no group needs a new head. It
// does not wait for rows other transactions hold (SKIP LOCKED): it
// returns the id of one it left (0: none).
func subscriptionClear(ctx context.Context, tx pgx.Tx, queueID int64) (int64, error) {
	var locked int64
	for after := int64(0); ; {
		var n, skipped int64
		err := tx.QueryRow(ctx, `/* ferry:subscription_clear */
			WITH c AS MATERIALIZED (
				SELECT queue_id, id FROM ferry.messages WHERE queue_id = $1 AND id > $2 ORDER BY id LIMIT $3
			),
			v AS MATERIALIZED (
				SELECT m.queue_id, m.id FROM c
				CROSS JOIN LATERAL (
					SELECT x.queue_id, x.id FROM ferry.messages x WHERE x.queue_id = c.queue_id AND x.id = c.id LIMIT 1
					FOR UPDATE SKIP LOCKED
				) m
			),
			gone AS (DELETE FROM ferry.messages m USING v WHERE m.queue_id = v.queue_id AND m.id = v.id)
			SELECT count(*), coalesce(max(id), $2), coalesce(min(id) FILTER (WHERE id NOT IN (SELECT id FROM v)), 0)
			FROM c`, queueID, after, purgeBatch).Scan(&n, &after, &skipped)
		if locked == 0 {
			locked = skipped
		}
		if err != nil || n < purgeBatch {
			return locked, err
		}
	}
}
