package store_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Retention drops exactly the events older than retention_seconds, oldest
// first, in bounded batches; oldest_offset advances, the head stays. Dedup
// ids are forgotten only after their window.
func TestEventRetention(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	name := e.name("r")
	keepName := e.name("keep")
	tp := e.topic(name, store.TopicPatch{Partitions: ptr(3), RetentionSeconds: ptr(60)})
	keep := e.topic(keepName, store.TopicPatch{Partitions: ptr(1)}) // default retention: 7 days
	keys := keysFor(3)
	for p := range 3 {
		var batch []store.PublishEvent
		for i := range 10 {
			batch = append(batch, eventWithKey(fmt.Sprintf("p%d-%d", p, i), keys[p]))
		}
		e.publish(tp, batch...)
	}
	var kbatch []store.PublishEvent
	for i := range 5 {
		kbatch = append(kbatch, eventWithID(fmt.Sprintf("k%d", i)))
	}
	e.publish(keep, kbatch...)

	backdate := func(topicID int64, partition int, below int64, age string) {
		t.Helper()
		_, err := e.db.Exec(e.ctx, `UPDATE ferry.events SET published_at = now() - $4::interval + "offset" * interval '1 millisecond'
			WHERE topic_id = $1 AND partition = $2 AND "offset" < $3`, topicID, partition, below, age)
		require.NoError(t, err)
	}
	backdate(tp.ID, 0, 4, "61 seconds")  // partition 0: offsets 0-3 expired
	backdate(tp.ID, 1, 10, "61 seconds") // partition 1: all expired
	backdate(tp.ID, 2, 3, "45 seconds")  // partition 2: old, but within retention
	backdate(keep.ID, 0, 5, "2 hours")   // another topic, within its retention

	expire := func(limit int) int64 {
		t.Helper()
		n, err := store.EventExpire(e.ctx, e.db, limit)
		require.NoError(t, err)
		return n
	}
	// Bounded: at most 3 per partition per call, oldest first.
	require.EqualValues(t, 3+3, expire(3))
	offs := e.offsets(tp)
	require.Equal(t, store.PartitionOffsets{Partition: 0, HeadOffset: 9, OldestOffset: 3}, offs[0])
	require.Equal(t, store.PartitionOffsets{Partition: 1, HeadOffset: 9, OldestOffset: 3}, offs[1])
	require.EqualValues(t, 1+7, expire(1000))
	require.Zero(t, expire(1000))

	offs = e.offsets(tp)
	require.Equal(t, []store.PartitionOffsets{
		{Partition: 0, HeadOffset: 9, OldestOffset: 4},
		{Partition: 1, HeadOffset: 9, OldestOffset: 10}, // nothing retained: head + 1
		{Partition: 2, HeadOffset: 9, OldestOffset: 0},
	}, offs)
	require.Equal(t, []store.PartitionOffsets{{Partition: 0, HeadOffset: 4, OldestOffset: 0}}, e.offsets(keep))
	require.EqualValues(t, 6+0+10, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1 AND published_at < now() - interval '60 seconds'`, tp.ID))

	// Reads from below the oldest offset start at the oldest retained.
	evs, next := e.read(store.ReadParams{Topic: tp, Partition: 0, FromOffset: 0})
	require.Equal(t, span(4, 9), eventOffsets(evs))
	require.EqualValues(t, 10, next)
	evs, next = e.read(store.ReadParams{Topic: tp, Partition: 1, FromOffset: 10})
	require.Empty(t, evs)
	require.EqualValues(t, 10, next)
	// Publishing on continues the offsets.
	r := e.publish(tp, eventWithKey("after", keys[1]))[0]
	require.EqualValues(t, 10, r.Offset)
	require.Equal(t, store.PartitionOffsets{Partition: 1, HeadOffset: 10, OldestOffset: 10}, e.offsets(tp)[1])

	// Dedup ids: only those past their window are forgotten; retention of
	// events does not forget ids still in their window.
	dupe := e.publish(tp, eventWithKey("p1-2", keys[1]))[0]
	require.True(t, dupe.Duplicate, "an id within its window stays a duplicate after its event expired")
	_, err := e.db.Exec(e.ctx, `UPDATE ferry.event_dedup SET expires_at = now() - interval '1 second'
		WHERE topic_id = $1 AND event_id IN ('p0-0', 'p0-1', 'p2-5')`, tp.ID)
	require.NoError(t, err)
	before := e.count(`SELECT count(*) FROM ferry.event_dedup`)
	n, err := store.EventDedupExpire(e.ctx, e.db, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	require.Equal(t, before-3, e.count(`SELECT count(*) FROM ferry.event_dedup`))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.event_dedup WHERE event_id IN ('p0-0', 'p0-1', 'p2-5')`))
	n, err = store.EventDedupExpire(e.ctx, e.db, 1000)
	require.NoError(t, err)
	require.Zero(t, n)
	// A forgotten id is new again; a remembered one is not.
	require.False(t, e.publish(tp, eventWithKey("p2-5", keys[2]))[0].Duplicate)
	require.True(t, e.publish(tp, eventWithKey("p2-6", keys[2]))[0].Duplicate)
}
