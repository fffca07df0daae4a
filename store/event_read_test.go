package store_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Reads by time: from_time lands on the first event published at or after
// the time (inclusive); a time after everything reads nothing, with
// next_offset the head + 1.
func TestEventReadFromTime(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	name := e.name("tm")
	tp := e.topic(name, store.TopicPatch{Partitions: ptr(2)})
	keys := keysFor(2)
	var batch []store.PublishEvent
	for i := range 10 {
		batch = append(batch, store.PublishEvent{Type: "t", Key: ptr(keys[0]), Data: json.RawMessage(fmt.Sprint(i))})
	}
	e.publish(tp, batch...)
	// Offsets 0-4 are an hour old, a second apart.
	_, err := e.db.Exec(e.ctx, `
		UPDATE ferry.events SET published_at = now() - interval '1 hour' + "offset" * interval '1 second'
		WHERE topic_id = $1 AND partition = 0 AND "offset" < 5`, tp.ID)
	require.NoError(t, err)
	at := map[int64]time.Time{}
	rows, err := e.db.Query(e.ctx, `SELECT "offset", published_at FROM ferry.events WHERE topic_id = $1`, tp.ID)
	require.NoError(t, err)
	for rows.Next() {
		var (
			o  int64
			ts time.Time
		)
		require.NoError(t, rows.Scan(&o, &ts))
		at[o] = ts
	}
	require.NoError(t, rows.Err())
	require.Len(t, at, 10)

	from := func(ts time.Time, limit int) ([]int64, int64) {
		t.Helper()
		evs, next := e.read(store.ReadParams{Topic: tp, Partition: 0, FromTime: &ts, Limit: limit})
		return eventOffsets(evs), next
	}
	cases := []struct {
		name  string
		at    time.Time
		limit int
		want  []int64
		next  int64
	}{
		{"BeforeEverything", at[0].Add(-24 * time.Hour), 100, span(0, 9), 10},
		{"ExactlyTheFirst", at[0], 100, span(0, 9), 10},
		{"Inclusive", at[3], 100, span(3, 9), 10},
		{"JustAfter", at[3].Add(time.Microsecond), 100, span(4, 9), 10},
		{"TheBoundary", at[4].Add(30 * time.Minute), 100, span(5, 9), 10},
		{"Limited", at[3], 2, []int64{3, 4}, 5},
		{"AfterEverything", time.Now().Add(time.Hour), 100, []int64{}, 10},
	}
	for _, c := range cases {
		got, next := from(c.at, c.limit)
		require.Equal(t, c.want, got, c.name)
		require.Equal(t, c.next, next, c.name)
	}
	require.EqualValues(t, 9, e.offsets(tp)[0].HeadOffset)
	// From each event's own time: every event at or after it, which (times
	// following offsets) is a suffix of the log.
	for o := range int64(10) {
		want := []int64{}
		for q := range int64(10) {
			if !at[q].Before(at[o]) {
				want = append(want, q)
			}
		}
		got, next := from(at[o], 100)
		require.Equal(t, want, got, "from the time of offset %d", o)
		require.EqualValues(t, 10, next)
	}

	// An empty partition: from any time, nothing, next_offset 0.
	for _, ts := range []time.Time{time.Time{}, at[0], time.Now().Add(time.Hour)} {
		evs, next := e.read(store.ReadParams{Topic: tp, Partition: 1, FromTime: &ts})
		require.Empty(t, evs)
		require.Zero(t, next)
	}
}

// Invariant 6 and from_time together: published_at must follow commit
// (offset) order, so that a read from a time never skips an event published
// at or after it. The interleaving is forced: publish A (partitions 0 and
// 1) starts first and waits for partition 0, which the test holds; publish
// B (partition 1 only) starts later and commits first; then A commits. A's
// event on partition 1 has the higher offset. Reading partition 1 from A's
// published_at must return B's event too if B's published_at is not
// earlier (and B's must not be later than A's if its offset is lower).
func TestEventReadFromTimeCommitOrder(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "co", 2)
	keys := keysFor(2)
	aPool := e.newNamedPool(2, "publisher-a")

	holder := e.holdPartition(tp, 0)
	aDone := publishAsync(e.ctx, aPool, tp, eventWithKey("a0", keys[0]), eventWithKey("a1", keys[1]))
	e.activityWaitingEventually("publisher-a")
	b := e.publish(tp, eventWithKey("b1", keys[1]))[0]
	require.Equal(t, store.PublishResult{ID: "b1", Partition: 1, Offset: 0}, b, "B went first on partition 1")
	require.NoError(t, holder.Rollback(e.ctx))
	a := <-aDone
	require.NoError(t, a.err)
	require.Equal(t, store.PublishResult{ID: "a1", Partition: 1, Offset: 1}, a.res[1])

	evs, next := e.read(store.ReadParams{Topic: tp, Partition: 1})
	require.Equal(t, []int64{0, 1}, eventOffsets(evs))
	require.EqualValues(t, 2, next)
	bAt, aAt := evs[0].PublishedAt, evs[1].PublishedAt
	require.False(t, aAt.Before(bAt), "published_at follows offsets: B (offset 0) %v, A (offset 1) %v", bAt, aAt)
	for _, ts := range []time.Time{bAt, aAt} {
		got, _ := e.read(store.ReadParams{Topic: tp, Partition: 1, FromTime: &ts})
		var want []int64
		for _, ev := range evs {
			if !ev.PublishedAt.Before(ts) {
				want = append(want, ev.Offset)
			}
		}
		require.Equal(t, want, eventOffsets(got), "from_time %v returns every event at or after it", ts)
	}
}

// Long polls: a waiting read returns soon after a publish announced by
// another Notifier (the wake crosses Postgres NOTIFY); with nothing
// published it returns empty after the whole wait.
func TestEventReadLongPoll(t *testing.T) {
	t.Parallel()

	t.Run("WokenByNotify", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "lp", 1)
		other := e.topic("other", store.TopicPatch{Partitions: ptr(1)})
		e.publish(tp, event("t"), event("t")) // the wait starts at offset 2
		readerPool := e.newNamedPool(4, "reader")
		readerN := e.runNotifierWindow(readerPool, 5*time.Millisecond)
		publisherN := e.runNotifierWindow(e.pool, 5*time.Millisecond)
		e.activityEventually("reader", "LISTEN %", 1)

		out := readAsync(e.ctx, readerPool, readerN, store.ReadParams{
			Topic: tp, FromOffset: 2, Limit: 10, Wait: 5 * time.Second, FallbackPoll: 10 * time.Second,
		})
		// The read looked once, found nothing and waits.
		e.activityEventually("reader", `%"offset" >= $3%`, 1)

		// Another topic's publish does not answer this read.
		e.publish(other, event("t"))
		publisherN.Published([]int64{store.TopicWakeKey(other.ID)})

		want := e.publish(tp, eventWithID("wake"))[0]
		publishedAt := time.Now()
		publisherN.Published([]int64{store.TopicWakeKey(tp.ID)})
		r := <-out
		require.NoError(t, r.err)
		require.Len(t, r.events, 1)
		require.Equal(t, "wake", r.events[0].ID)
		require.Equal(t, want.Offset, r.events[0].Offset)
		require.EqualValues(t, 3, r.next)
		require.Less(t, time.Since(publishedAt), 2*time.Second, "woken by NOTIFY, not by the 10 s fallback poll")
	})

	t.Run("EmptyAfterWait", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "lp", 2)
		e.publish(tp, eventWithKey("x", keysFor(2)[0]))
		n := e.runNotifierWindow(e.pool, 5*time.Millisecond)
		for _, from := range []int64{0, 1, 7} {
			r := <-readAsync(e.ctx, e.pool, n, store.ReadParams{
				Topic: tp, Partition: 1, FromOffset: from, Limit: 10, Wait: time.Second, FallbackPoll: 100 * time.Millisecond,
			})
			require.NoError(t, r.err)
			require.Empty(t, r.events)
			require.Equal(t, from, r.next, "next_offset is the requested position")
			require.GreaterOrEqual(t, r.elapsed, 900*time.Millisecond, "waited the whole wait")
		}
	})

	t.Run("NoWaitWhenEventsExist", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "lp", 1)
		e.publish(tp, event("t"))
		n := e.runNotifierWindow(e.pool, 5*time.Millisecond)
		r := <-readAsync(e.ctx, e.pool, n, store.ReadParams{Topic: tp, Limit: 10, Wait: 5 * time.Second, FallbackPoll: 10 * time.Second})
		require.NoError(t, r.err)
		require.Len(t, r.events, 1)
		require.Less(t, r.elapsed, 2*time.Second)
	})
}
