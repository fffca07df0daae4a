package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

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
				(SELECT `+partitionNextSQL("p")+` FROM ferry.topic_partitions p WHERE p.topic_id = $1 AND p.partition = $2), 0)`,
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
			(SELECT `+partitionNextSQL("p")+` FROM ferry.topic_partitions p WHERE p.topic_id = $1 AND p.partition = $2), 0)`,
		topicID, partition).Scan(&o)
	return o
}

func eventReadOnce(ctx context.Context, db DBTX, topicID int64, partition int, from int64, limit int) ([]Event, error) {
	rows, err := db.Query(ctx, `/* ferry:event_read */
		SELECT id, type, key, data::text, attributes::text, ce::text, partition, "offset", published_at
		FROM ferry.events WHERE topic_id = $1 AND partition = $2 AND "offset" >= $3
		ORDER BY "offset" LIMIT $4`, topicID, partition, from, limit)
	if err != nil {
		return nil, interpretError("event read", err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	return events, interpretError("event read", err)
}
