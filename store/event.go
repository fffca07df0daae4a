package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PublishEvent is one event of a publish batch, already validated.
type PublishEvent struct {
	ID         string // "" = generate one
	Type       string
	Key        *string
	Data       json.RawMessage // nil = no data
	Attributes json.RawMessage // a JSON object, or nil
}

// PublishResult is where one published event landed.
type PublishResult struct {
	ID        string
	Partition int
	// Offset is PendingOffset for a duplicate of an event of the SQL API
	// that the relay has not appended yet (see EventAwaitAppended).
	Offset    int64
	Duplicate bool
}

// PartitionForKey is the partition of a keyed event: the FNV-1a 32-bit
// hash of the key's UTF-8 bytes, as an unsigned integer, modulo the
// partitions. Growing a topic's partitions remaps keys.
func PartitionForKey(key string, partitions int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(partitions))
}

// NewEventID makes an id for an event published without one.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "evt_" + hex.EncodeToString(b[:])
}

// PublishParams is a publish: events for a topic.
type PublishParams struct {
	Topic  Topic
	Events []PublishEvent
	// Spreader picks the partitions of keyless events. The caller owns it
	// (a Publisher has one); nil spreads each publish's keyless events
	// round-robin from a random partition, as even over many publishes
	// but not turn by turn.
	Spreader *Spreader
}

// PublishOutcome is what a publish wrote: where each event landed, and
// whom to wake once its transaction has committed.
type PublishOutcome struct {
	// Results says where each event landed, in the order given.
	Results []PublishResult
	// Subscriptions lists the subscriptions that got deliveries, once
	// each, in id order: their push workers are to be kicked.
	Subscriptions []int64
	// WakeKeys are the Notifier keys to wake: the topic's (TopicWakeKey),
	// for its event readers and consumer groups, then Subscriptions (a
	// subscription is a queue: its key is its id), for their receivers.
	WakeKeys []int64
}

// EventPublish appends events to the topic in a transaction of its own
// and answers, in order, where each landed, and the subscriptions that
// got deliveries. An id seen on the topic within its dedup window (or
// earlier in the batch) is a duplicate: it answers the original's
// partition and offset and appends nothing. Keyless events are spread
// from a random partition (see PublishParams.Spreader); a [Publisher]
// spreads them round-robin per topic.
//
// It is one transaction in two round trips (BEGIN travels with the first
// and COMMIT with the second; see [EventPublishTx] for what they do). The
// partition locks are thus held for one round trip and the commit. A
// transaction that fails only through concurrency (a subscription change,
// a deadlock) is run again, up to 10 times.
func EventPublish(ctx context.Context, pool *pgxpool.Pool, t Topic, events []PublishEvent) ([]PublishResult, []int64, error) {
	out, err := eventPublish(ctx, pool, PublishParams{Topic: t, Events: events}, nil, claimWaitAlone)
	if err != nil {
		return nil, nil, err
	}
	return out.Results, out.Subscriptions, nil
}

// eventPublish is EventPublish with its parameters, for the Publisher,
// which keeps the subscriptions' parsed filters in filters (nil: parsed
// by each publish) and bounds the wait for an id claimed by another
// transaction by claimWait (see claimDedup).
func eventPublish(ctx context.Context, pool *pgxpool.Pool, p PublishParams, filters *filterCache, claimWait string) (PublishOutcome, error) {
	batch := newPublishBatch(p.Topic, p.Events, p.Spreader, filters)
	batch.claimWait = claimWait
	var out PublishOutcome
	// More attempts than other transactions: a publish also starts again
	// when a subscription of the topic changed meanwhile.
	err := retryN(ctx, 10, func() error {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		out, err = batch.write(ctx, conn.Conn(), true, true)
		if err != nil && conn.Conn().PgConn().TxStatus() != 'I' {
			// Leave the connection clean; the pool drops it if this fails.
			_, _ = conn.Exec(context.Background(), "ROLLBACK")
		}
		return err
	})
	if err != nil {
		return PublishOutcome{}, interpretError("event publish", err)
	}
	return out, nil
}

// EventPublishTx appends p.Events to p.Topic in the caller's transaction
// tx, with their dedup claims, offsets and deliveries to every matching
// subscription; the results (as [EventPublish]'s) hold once tx commits.
//
//   - tx must be READ COMMITTED (the default).
//   - tx holds the topic's partition row locks until it ends: never
//     publish this way in a transaction that may stay open (the SQL API's
//     ferry.publish goes through the [Relay] instead); see "Locks" in the
//     package doc.
//   - It wakes no one: after commit, wake out.WakeKeys
//     ([Notifier.Published]) and kick the push of out.Subscriptions.
//   - An error wrapping [ErrBusy] aborted tx (a concurrent subscription
//     change, a deadlock): run the whole transaction again. [ErrNotFound]:
//     the topic is gone.
func EventPublishTx(ctx context.Context, tx pgx.Tx, p PublishParams) (PublishOutcome, error) {
	out, err := newPublishBatch(p.Topic, p.Events, p.Spreader, nil).write(ctx, tx, false, false)
	if err != nil {
		return PublishOutcome{}, interpretError("event publish", err)
	}
	return out, nil
}

// Event is an event as readers see it.
type Event struct {
	ID          string
	Type        string
	Key         *string
	Data        json.RawMessage // nil when the event had none
	Attributes  json.RawMessage // nil when none
	Partition   int
	Offset      int64
	PublishedAt time.Time
}

// ReadParams selects events of one partition: from FromOffset, or from the
// first event published at or after FromTime.
type ReadParams struct {
	Topic      Topic
	Partition  int
	FromOffset int64
	FromTime   *time.Time
	Limit      int
	// Wait, when no event is there yet, long-polls that long.
	Wait         time.Duration
	FallbackPoll time.Duration
	Stop         <-chan struct{}
	// Recheck, when set, is called before every read after the first
	// (after each wait): its error ends the long poll with it, nothing read.
	// The handlers re-check the request's key with it.
	Recheck func(context.Context) error
}

// TopicWakeKey is the [Notifier] key of a topic: topics share the notifier
// with queues, whose keys are their (positive) ids.
func TopicWakeKey(topicID int64) int64 { return -topicID }

// EventRead returns up to Limit events of the partition in offset order
// and the offset to read next. With FromTime, the position is the first
// offset published at or after it.
func EventRead(ctx context.Context, db DBTX, n *Notifier, p ReadParams) ([]Event, int64, error) {
	from := p.FromOffset
	if p.FromTime != nil {
		err := db.QueryRow(ctx, `/* ferry:event_position_at */
			SELECT coalesce(
				(SELECT "offset" FROM ferry.events WHERE topic_id = $1 AND partition = $2 AND published_at >= $3
				 ORDER BY published_at, "offset" LIMIT 1),
				(SELECT next_offset FROM ferry.topic_partitions WHERE topic_id = $1 AND partition = $2), 0)`,
			p.Topic.ID, p.Partition, *p.FromTime).Scan(&from)
		if err != nil {
			return nil, 0, interpretError("event read", err)
		}
	}
	var events []Event
	err := longPoll(ctx, n, TopicWakeKey(p.Topic.ID), p.Wait, p.FallbackPoll, p.Stop, rechecked(ctx, p.Recheck, func() (bool, error) {
		var err error
		events, err = eventReadOnce(ctx, db, p.Topic.ID, p.Partition, from, p.Limit)
		return len(events) > 0, err
	}))
	if err != nil {
		return nil, 0, err
	}
	if len(events) == 0 {
		return nil, max(from, oldestOffset(ctx, db, p.Topic.ID, p.Partition)), nil
	}
	return events, events[len(events)-1].Offset + 1, nil
}

// oldestOffset is the partition's oldest retained offset (its next offset
// when nothing is retained); 0 if it cannot be read.
func oldestOffset(ctx context.Context, db DBTX, topicID int64, partition int) int64 {
	var o int64
	_ = db.QueryRow(ctx, `/* ferry:event_oldest */
		SELECT coalesce(
			(SELECT "offset" FROM ferry.events WHERE topic_id = $1 AND partition = $2 ORDER BY "offset" LIMIT 1),
			(SELECT next_offset FROM ferry.topic_partitions WHERE topic_id = $1 AND partition = $2), 0)`,
		topicID, partition).Scan(&o)
	return o
}

func eventReadOnce(ctx context.Context, db DBTX, topicID int64, partition int, from int64, limit int) ([]Event, error) {
	rows, err := db.Query(ctx, `/* ferry:event_read */
		SELECT id, type, key, data::text, attributes::text, partition, "offset", published_at
		FROM ferry.events WHERE topic_id = $1 AND partition = $2 AND "offset" >= $3
		ORDER BY "offset" LIMIT $4`, topicID, partition, from, limit)
	if err != nil {
		return nil, interpretError("event read", err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	return events, interpretError("event read", err)
}

// EventExpire deletes, per topic partition, up to limit events older than
// the topic's retention, oldest first, one topic per statement (so no
// statement deletes more than partitions × limit rows), and reports how
// many it deleted. The time index finds them without reading younger
// events.
//
// The topics with anything to expire are found first by one statement
// that looks at the oldest event of each partition, so a sweep that finds
// nothing writes nothing and commits once (DESIGN.md invariant 12).
func EventExpire(ctx context.Context, db DBTX, limit int) (int64, error) {
	rows, err := db.Query(ctx, `/* ferry:event_expire_due */
		SELECT t.id FROM ferry.topics t WHERE `+eventExpireDue+` ORDER BY t.id`)
	if err != nil {
		return 0, interpretError("event expire", err)
	}
	topics, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, interpretError("event expire", err)
	}
	var total int64
	for _, id := range topics {
		// The oldest events of each partition by the time index, and
		// then by ctid (events are never updated): joined on their key,
		// the planner may reach each through an index that walks the
		// partition.
		tag, err := db.Exec(ctx, `/* ferry:event_expire */
			DELETE FROM ferry.events e USING (
				SELECT v.ctid
				FROM ferry.topics t
				JOIN ferry.topic_partitions p ON p.topic_id = t.id
				CROSS JOIN LATERAL (
					SELECT ctid FROM ferry.events
					WHERE topic_id = t.id AND partition = p.partition
						AND published_at < now() - t.retention_seconds * interval '1 second'
					ORDER BY published_at LIMIT $2
				) v
				WHERE t.id = $1
			) old
			WHERE e.ctid = old.ctid`, id, limit)
		if err != nil {
			return total, interpretError("event expire", err)
		}
		total += tag.RowsAffected()
	}
	return total, nil
}

// eventExpireDue is true for a topic t whose oldest event in some
// partition is past retention: one probe of the time index per partition.
const eventExpireDue = `EXISTS (
			SELECT 1 FROM ferry.topic_partitions p
			CROSS JOIN LATERAL (
				SELECT e.published_at FROM ferry.events e
				WHERE e.topic_id = p.topic_id AND e.partition = p.partition
				ORDER BY e.published_at LIMIT 1
			) e
			WHERE p.topic_id = t.id AND e.published_at < now() - t.retention_seconds * interval '1 second'
		)`

// EventDedupExpire deletes up to limit event ids whose window has ended.
// It skips ids whose rows other transactions hold (a publish taking over
// an expired id holds its row to its commit, and an application's
// transaction may stay open for minutes): the next sweep deletes them if
// they are still expired then.
func EventDedupExpire(ctx context.Context, db DBTX, limit int) (int64, error) {
	// The oldest ids by the expiry index, locked unless another
	// transaction holds them (SKIP LOCKED), each deleted by its ctid in a
	// statement of its own (see ferry.event_dedup_delete).
	var n int64
	err := db.QueryRow(ctx, `/* ferry:event_dedup_expire */
		SELECT count(ferry.event_dedup_delete(ctid, expires_at)) FROM (
			SELECT ctid, expires_at FROM ferry.event_dedup WHERE expires_at < now() ORDER BY expires_at LIMIT $1
			FOR UPDATE SKIP LOCKED
		) old`, limit).Scan(&n)
	if err != nil {
		return 0, interpretError("event dedup expire", err)
	}
	return n, nil
}

// scanEvent reads the columns id, type, key, data, attributes, partition,
// offset, published_at.
func scanEvent(row pgx.CollectableRow) (Event, error) {
	var (
		e           Event
		data, attrs *string
	)
	err := row.Scan(&e.ID, &e.Type, &e.Key, &data, &attrs, &e.Partition, &e.Offset, &e.PublishedAt)
	if data != nil {
		e.Data = []byte(*data)
	}
	if attrs != nil {
		e.Attributes = []byte(*attrs)
	}
	return e, err
}
