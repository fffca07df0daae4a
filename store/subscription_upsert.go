package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

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
	if err := deadLetterQueueLock(ctx, tx, u.patch.Queue.DeadLetterQueue); err != nil {
		return Subscription{}, err
	}
	if err := lockTopicForSubscriptions(ctx, tx, u.topic.ID); err != nil {
		return Subscription{}, err
	}
	return scanSubscription(tx.QueryRow(ctx,
		`SELECT `+subscriptionColumns+` FROM ferry.queues q WHERE topic_id = $1 AND name = $2 FOR UPDATE OF q`, u.topic.ID, u.name))
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
	if err := deadLetterQueueSet(ctx, tx, &s.Queue, next.cfg.DeadLetterQueue, false); err != nil {
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

// Wakes returns what a [SubscriptionUpsert] with the patch, which answered
// s, created and backfilled, asks to wake: what its queue settings ask,
// and the long polls when its creation backfilled events.
func (p SubscriptionPatch) Wakes(s Subscription, created bool, backfilled int64) UpsertWakes {
	w := p.Queue.Wakes(s.Queue)
	w.Claimable = created && backfilled > 0
	return w
}
