package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Subscription is a queue fed by a topic: its [Queue] part (id, name,
// visibility timeout, max_receives, retention, retry backoff) is what the
// claim engine uses, unchanged.
type Subscription struct {
	Queue
	TopicID int64
	Filter  *Filter
	Ordered bool
}

// StartPosition says where a new subscription (or a seek) begins: the zero value is
// "latest" (only events published from now on); Earliest is every
// retained event; Time the retained events published at or after it.
type StartPosition struct {
	Earliest bool
	Time     *time.Time
}

// SubscriptionPatch holds the fields a PUT gives; nil fields keep their
// value (or take the default on creation).
type SubscriptionPatch struct {
	// Queue settings; delay, dedup window and max depth do not apply to
	// subscriptions and are ignored.
	Queue   QueuePatch
	Filter  *Filter
	Ordered *bool
	// Start applies on creation only.
	Start StartPosition
}

// DefaultSubscriptionConfig is what a new subscription gets for every
// queue setting not given: a queue's defaults, with the retention of a
// topic (7 days).
func DefaultSubscriptionConfig() QueueConfig {
	c := DefaultQueueConfig()
	c.RetentionSeconds = 604800
	return c
}

const subscriptionColumns = queueColumns + `, topic_id, filter::text, ordered`

func scanSubscription(row pgx.Row) (Subscription, error) {
	var (
		s      Subscription
		filter *string
	)
	q, err := scanQueue(row, &s.TopicID, &filter, &s.Ordered)
	if err != nil {
		return Subscription{}, err
	}
	s.Queue = q
	s.Filter = storedFilter(filter)
	return s, nil
}

// lockTopicForSubscriptions bumps the topic's subs_version and then takes
// every partition row of the topic, in partition order (as publishes take
// them): it waits for publishes in progress, and publishes that read the
// subscriptions before this commits start again (see EventPublish). The
// topic's row is locked first, as TopicUpsert and TopicDelete lock it
// before partitions: a partition being added commits before this reads
// the partitions, so a publish to it is ordered too. It returns
// ErrNotFound when the topic is gone.
func lockTopicForSubscriptions(ctx context.Context, tx pgx.Tx, topicID int64) error {
	tag, err := tx.Exec(ctx, `/* ferry:topic_subscriptions_bump */ UPDATE ferry.topics SET subs_version = subs_version + 1 WHERE id = $1`, topicID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	var n int
	err = tx.QueryRow(ctx, `/* ferry:topic_partitions_lock_all */
		SELECT count(*) FROM (
			SELECT 1 FROM ferry.topic_partitions WHERE topic_id = $1 ORDER BY partition FOR UPDATE
		) locked`, topicID).Scan(&n)
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// SubscriptionUpsert creates the named subscription of topic t, or changes
// the given fields of an existing one, and reports whether it created it
// and how many retained events it backfilled (Start, on creation). It is
// ordered with publishes to the topic: a publish that commits before it
// fans out with the old configuration, every later one with the new.
func SubscriptionUpsert(ctx context.Context, db TxBeginner, t Topic, name string, p SubscriptionPatch) (Subscription, bool, int64, error) {
	u := &subscriptionUpsert{topic: t, name: name, patch: p}
	s, created, err := upsert[Subscription, subscriptionSettings]{
		lock: u.lock, merge: u.merge, same: subscriptionSettings.same, write: u.write,
	}.run(ctx, db)
	if err == nil && u.fence != nil {
		u.backfilled, err = subscriptionBackfillBatches(ctx, db, s, p.Start, u.fence)
	}
	if err != nil {
		return Subscription{}, false, 0, upsertError("subscription upsert", err)
	}
	return s, created, u.backfilled, nil
}

// subscriptionUpsert is one SubscriptionUpsert: what it was asked, and
// what its last attempt planned (backfilled and fence: set by an attempt
// that writes, cleared at the start of each).
type subscriptionUpsert struct {
	topic Topic
	name  string
	patch SubscriptionPatch

	backfilled int64
	// fence is where an unordered subscription's backfill stops (partition
	// → head), to run after the commit; nil: no backfill after the commit.
	fence map[int]int64
}

// subscriptionSettings is what a subscription is to be: its current
// settings (or the defaults) with the patch applied.
type subscriptionSettings struct {
	queueSettings
	filter  *Filter
	ordered bool
}

// lock starts an attempt: it drops what an earlier attempt planned (an
// attempt that changes nothing must not backfill after the commit what a
// rolled-back one planned), locks the topic against publishes, then reads
// the subscription FOR UPDATE (pgx.ErrNoRows: it is to be created).
func (u *subscriptionUpsert) lock(ctx context.Context, tx pgx.Tx) (Subscription, error) {
	u.backfilled, u.fence = 0, nil
	if err := lockTopicForSubscriptions(ctx, tx, u.topic.ID); err != nil {
		return Subscription{}, err
	}
	return scanSubscription(tx.QueryRow(ctx,
		`SELECT `+subscriptionColumns+` FROM ferry.queues WHERE topic_id = $1 AND name = $2 FOR UPDATE`, u.topic.ID, u.name))
}

// merge applies the patch to the existing subscription's settings (the
// defaults on creation) and validates the result.
func (u *subscriptionUpsert) merge(existing Subscription, created bool) (subscriptionSettings, error) {
	base, filter, ordered := DefaultSubscriptionConfig(), &Filter{}, false
	if !created {
		base, filter, ordered = existing.QueueConfig, existing.Filter, existing.Ordered
	}
	q, err := u.patch.Queue.merge(base, existing.Push)
	if err != nil {
		return subscriptionSettings{}, err
	}
	if u.patch.Filter != nil {
		filter = u.patch.Filter
	}
	if u.patch.Ordered != nil {
		ordered = *u.patch.Ordered
	}
	return subscriptionSettings{queueSettings: q, filter: filter, ordered: ordered}, nil
}

// same reports whether the settings are those the subscription has.
func (n subscriptionSettings) same(s Subscription) bool {
	return n.queueSettings.same(s.Queue) && n.ordered == s.Ordered &&
		string(n.filter.JSON()) == string(s.Filter.JSON())
}

// write inserts or updates the subscription's row and its push settings,
// and plans its backfill.
func (u *subscriptionUpsert) write(ctx context.Context, tx pgx.Tx, next subscriptionSettings, created bool) (Subscription, error) {
	cfg := next.cfg
	s, err := scanSubscription(tx.QueryRow(ctx, `
		INSERT INTO ferry.queues AS q (topic_id, name, visibility_timeout_seconds, max_receives,
			retention_seconds, retry_min_seconds, retry_max_seconds, filter, ordered)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (topic_id, name) WHERE topic_id IS NOT NULL DO UPDATE SET
			visibility_timeout_seconds = excluded.visibility_timeout_seconds,
			max_receives = excluded.max_receives,
			retention_seconds = excluded.retention_seconds,
			retry_min_seconds = excluded.retry_min_seconds,
			retry_max_seconds = excluded.retry_max_seconds,
			filter = excluded.filter,
			ordered = excluded.ordered,
			updated_at = now()
		RETURNING `+subscriptionColumns,
		u.topic.ID, u.name, cfg.VisibilityTimeoutSeconds, cfg.MaxReceives, cfg.RetentionSeconds,
		cfg.RetryMinSeconds, cfg.RetryMaxSeconds, next.filter.JSON(), next.ordered))
	if err != nil {
		return Subscription{}, err
	}
	if err := pushSet(ctx, tx, &s.Queue, next.push, u.patch.Queue.Push); err != nil {
		return Subscription{}, err
	}
	return s, u.planBackfill(ctx, tx, s, next.ordered, created)
}

// planBackfill backfills a subscription created with a Start: an ordered
// one here, an unordered one after the commit, up to the heads it notes.
func (u *subscriptionUpsert) planBackfill(ctx context.Context, tx pgx.Tx, s Subscription, ordered, created bool) error {
	var err error
	switch start := u.patch.Start; {
	case !created || (!start.Earliest && start.Time == nil):
	case ordered:
		// In offset order per key, before any later event: under the
		// partition locks, window after window in this transaction.
		u.backfilled, err = subscriptionBackfillLocked(ctx, tx, s, start)
	default:
		// After the commit, in bounded batches, up to the heads as they
		// are now (later events are fanned out by their publishes):
		// publishes do not wait for the backfill.
		u.fence, err = partitionHeads(ctx, tx, u.topic.ID)
	}
	return err
}

// partitionHeads reads each partition's next offset (under the partition
// locks, so that exactly the events before them are the past).
func partitionHeads(ctx context.Context, tx pgx.Tx, topicID int64) (map[int]int64, error) {
	rows, err := tx.Query(ctx, `/* ferry:topic_heads */ SELECT partition, next_offset FROM ferry.topic_partitions WHERE topic_id = $1`, topicID)
	if err != nil {
		return nil, err
	}
	heads := map[int]int64{}
	for rows.Next() {
		var (
			p int
			n int64
		)
		if err := rows.Scan(&p, &n); err != nil {
			rows.Close()
			return nil, err
		}
		heads[p] = n
	}
	return heads, rows.Err()
}

// subscriptionBackfillBatches backfills an unordered subscription with the
// retained events from start up to the fence (partition → first offset
// not to backfill), in windows, each its own transaction (see backfill).
// If it stops half way (an error, a crash), the subscription has part of
// the past: a seek to the same start completes it.
func subscriptionBackfillBatches(ctx context.Context, db TxBeginner, s Subscription, start StartPosition, fence map[int]int64) (int64, error) {
	b := newBackfill(s)
	ranges, err := b.ranges(ctx, db, start, fence)
	if err != nil {
		return 0, err
	}
	return b.batches(ctx, db, ranges)
}

// subscriptionBackfillLocked delivers to s the retained events of its
// topic from start on that its filter selects, in publish order (so an
// ordered subscription gets each key's events in offset order), skipping
// events it already holds. It runs in tx, under the topic's partition
// locks (lockTopicForSubscriptions): no publish interleaves, so
// backfilled events come before every later one, at the cost of windows
// over the retained events from start while publishes wait.
func subscriptionBackfillLocked(ctx context.Context, tx pgx.Tx, s Subscription, start StartPosition) (int64, error) {
	if !start.Earliest && start.Time == nil {
		return 0, nil
	}
	heads, err := partitionHeads(ctx, tx, s.TopicID)
	if err != nil {
		return 0, err
	}
	b := newBackfill(s)
	ranges, err := b.ranges(ctx, tx, start, heads)
	if err != nil {
		return 0, err
	}
	return b.locked(ctx, tx, ranges)
}

// SubscriptionGet returns the named subscription of the topic.
func SubscriptionGet(ctx context.Context, db DBTX, topicID int64, name string) (Subscription, error) {
	s, err := scanSubscription(db.QueryRow(ctx,
		`/* ferry:subscription_get */ SELECT `+subscriptionColumns+` FROM ferry.queues WHERE topic_id = $1 AND name = $2`, topicID, name))
	return s, interpretError("subscription get", err)
}

// SubscriptionListParams selects one page of [SubscriptionList].
type SubscriptionListParams struct {
	TopicID int64
	After   string // only subscriptions named after this one ("" = from the first)
	Limit   int    // at most this many; 0 = every one
}

// SubscriptionList returns the topic's subscriptions named after p.After,
// by name, at most p.Limit of them, and whether more follow: a keyset page
// read from subscriptions_name_idx.
func SubscriptionList(ctx context.Context, db DBTX, p SubscriptionListParams) ([]Subscription, bool, error) {
	subs, err := subscriptionsWhere(ctx, db, `topic_id = $1 AND name > $2 ORDER BY name LIMIT $3`,
		p.TopicID, p.After, pageLimit(p.Limit))
	if err != nil {
		return nil, false, err
	}
	subs, more := pageCut(subs, p.Limit)
	return subs, more, nil
}

// SubscriptionListAll returns every subscription of every topic, by topic
// and name.
func SubscriptionListAll(ctx context.Context, db DBTX) ([]Subscription, error) {
	return subscriptionsWhere(ctx, db, `topic_id IS NOT NULL ORDER BY topic_id, name`)
}

func subscriptionsWhere(ctx context.Context, db DBTX, where string, args ...any) ([]Subscription, error) {
	rows, err := db.Query(ctx, `SELECT `+subscriptionColumns+` FROM ferry.queues WHERE `+where, args...)
	if err != nil {
		return nil, interpretError("subscription list", err)
	}
	subs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Subscription, error) { return scanSubscription(row) })
	return subs, interpretError("subscription list", err)
}

// SubscriptionDelete deletes the named subscription and returns its id; tx
// must be a transaction, in which the caller schedules the removal of its
// deliveries ([QueueDeleteContent]). No publish writes to it afterwards.
func SubscriptionDelete(ctx context.Context, tx pgx.Tx, topicID int64, name string) (int64, error) {
	if err := lockTopicForSubscriptions(ctx, tx, topicID); err != nil {
		return 0, interpretError("subscription delete", err)
	}
	var id int64
	err := tx.QueryRow(ctx, `
		SELECT id FROM ferry.queues, pg_advisory_xact_lock(ferry.queue_lock_key(id))
		WHERE topic_id = $1 AND name = $2`, topicID, name).Scan(&id)
	if err != nil {
		return 0, interpretError("subscription delete", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM ferry.queues WHERE id = $1`, id); err != nil {
		return 0, interpretError("subscription delete", err)
	}
	return id, nil
}

// SubscriptionSeek moves the subscription to start: every pending
// delivery is removed (in flight ones too; their receipts go stale) and
// the retained events from start that the filter selects are delivered
// again ("latest" delivers nothing: everything so far counts as
// acknowledged). Dead letters stay. It reports how many events it
// delivered.
//
// An ordered subscription is sought in one transaction holding the
// topic's partitions (publishes wait), so each key stays in order. An
// unordered one only fences under them (the newest delivery id and the
// partitions' heads), then deletes and backfills in bounded batches while
// publishes go on: deliveries of events published after the fence are
// kept, and the backfill stops at the heads. Redrives into the
// subscription wait for the whole seek (its queue lock is held on the
// seek's connection), so a redriven message is not deleted by it.
//
// A delivery another transaction holds (an application's transaction that
// received it through the SQL API, perhaps holding its key's group lock
// too) is removed once that transaction ends: the seek waits for it
// holding no lock (see messageDeleteSet), so it cannot deadlock with it,
// and an ordered seek's transaction starts again after the wait rather
// than hold the topic's partitions meanwhile.
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
			if err := lockTopicForSubscriptions(ctx, tx, s.TopicID); err != nil {
				return err
			}
			var err error
			cur, err = scanSubscription(tx.QueryRow(ctx, `SELECT `+subscriptionColumns+` FROM ferry.queues WHERE id = $1`, s.ID))
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
		`SELECT `+subscriptionColumns+` FROM ferry.queues WHERE id = $1`, s.ID))
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
