package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
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

// SubscriptionGet returns the named subscription of the topic.
func SubscriptionGet(ctx context.Context, db DBTX, topicID int64, name string) (Subscription, error) {
	s, err := scanSubscription(db.QueryRow(ctx,
		`/* ferry:subscription_get */ SELECT `+subscriptionColumns+` FROM ferry.queues q WHERE topic_id = $1 AND name = $2`, topicID, name))
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
	rows, err := db.Query(ctx, `SELECT `+subscriptionColumns+` FROM ferry.queues q WHERE `+where, args...)
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
