package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Backfill and seek deliver the retained events the filter selects, once
// each: from the earliest, or from a time (inclusive); a seek drops every
// pending delivery first (their receipts go stale) and "latest" leaves
// nothing.
func TestSubscriptionBackfillAndSeek(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "bf", 3)
	var batch []store.PublishEvent
	for i := range 30 {
		typ := "a.x"
		if i%3 == 2 {
			typ = "b.x"
		}
		batch = append(batch, store.PublishEvent{ID: fmt.Sprintf("e%02d", i), Type: typ, Key: ptr(fmt.Sprintf("k%d", i%5))})
	}
	// Three publishes of ten, so that published_at differs between them.
	for i := 0; i < len(batch); i += 10 {
		e.publish(tp, batch[i:i+10]...)
	}
	logged := e.allEvents(tp)
	require.Len(t, logged, 30)
	matchA := map[string]bool{}
	for id, ev := range logged {
		if ev.Type == "a.x" {
			matchA[id] = true
		}
	}
	require.Len(t, matchA, 20)
	// The cut: the published_at of e15, inclusive.
	cut := logged["e15"].PublishedAt
	fromCut := map[string]bool{}
	for id := range matchA {
		if !logged[id].PublishedAt.Before(cut) {
			fromCut[id] = true
		}
	}
	require.True(t, fromCut["e15"])
	require.Less(t, len(fromCut), len(matchA))

	t.Run("earliest", func(t *testing.T) {
		s, n := e.subscribe(tp, "earliest", `{"types":["a.*"]}`, store.SubscriptionPatch{Start: store.StartPosition{Earliest: true}})
		require.EqualValues(t, len(matchA), n)
		requireSameSet(t, matchA, e.deliveredIDs(s.ID), "earliest")
		for _, d := range e.deliveries(s.ID) {
			requireBodyIsEvent(t, d.Body, logged[d.EventID])
		}
		e.requireCountersExact(s.Queue)
	})
	t.Run("time", func(t *testing.T) {
		s, n := e.subscribe(tp, "time", `{"types":["a.*"]}`, store.SubscriptionPatch{Start: store.StartPosition{Time: &cut}})
		require.EqualValues(t, len(fromCut), n)
		requireSameSet(t, fromCut, e.deliveredIDs(s.ID), "from time")
	})
	t.Run("latest", func(t *testing.T) {
		s, n := e.subscribe(tp, "latest", `{"types":["a.*"]}`, store.SubscriptionPatch{})
		require.Zero(t, n)
		require.Zero(t, e.live(s.Queue))
		// Start applies on creation only.
		_, created, n, err := store.SubscriptionUpsert(e.ctx, e.pool, tp, "latest", store.SubscriptionPatch{Start: store.StartPosition{Earliest: true}})
		require.NoError(t, err)
		require.False(t, created)
		require.Zero(t, n)
		require.Zero(t, e.live(s.Queue))
	})
	t.Run("ordered", func(t *testing.T) {
		s, n := e.subscribe(tp, "ordered", `{"types":["a.*"]}`, store.SubscriptionPatch{Ordered: ptr(true), Start: store.StartPosition{Earliest: true}})
		require.EqualValues(t, len(matchA), n)
		// Per key, one head, the lowest offset, and ids in offset order.
		last := map[string]int64{}
		for _, d := range e.deliveries(s.ID) {
			require.NotNil(t, d.Grp)
			prev, seen := last[*d.Grp]
			require.Equal(t, seen, d.Waiting, "delivery %d of group %s", d.ID, *d.Grp)
			if seen {
				require.Greater(t, d.Body.Offset, prev)
			}
			last[*d.Grp] = d.Body.Offset
		}
		require.Len(t, last, 5)
	})
	t.Run("seek", func(t *testing.T) {
		s, _ := e.subscribe(tp, "seek", `{"types":["a.*"]}`, store.SubscriptionPatch{})
		// Some pending deliveries: two events published after creation,
		// one of them claimed, one acked.
		e.publish(tp, store.PublishEvent{ID: "late1", Type: "a.y"}, store.PublishEvent{ID: "late2", Type: "a.y"},
			store.PublishEvent{ID: "late3", Type: "b.y"})
		all := map[string]bool{"late1": true, "late2": true}
		for id := range matchA {
			all[id] = true
		}
		claimed := e.claim(s.Queue, 1, time.Minute)
		require.Len(t, claimed, 1)
		require.Equal(t, []bool{true}, e.ack(s.Queue, claimed[0].Receipt))
		claimed = e.claim(s.Queue, 1, time.Minute)
		require.Len(t, claimed, 1)
		require.EqualValues(t, 1, e.live(s.Queue))

		n, err := store.SubscriptionSeek(e.ctx, e.pool, s, store.StartPosition{Earliest: true})
		require.NoError(t, err)
		require.EqualValues(t, len(all), n)
		requireSameSet(t, all, e.deliveredIDs(s.ID), "after seek to earliest")
		require.EqualValues(t, len(all), e.live(s.Queue))
		e.requireCountersExact(s.Queue)
		require.Equal(t, []bool{false}, e.ack(s.Queue, claimed[0].Receipt), "a receipt from before the seek")
		require.Equal(t, []bool{false}, e.extend(s.Queue, time.Minute, claimed[0].Receipt))

		// Again, with a claim in flight: still once each.
		claimed = e.claim(s.Queue, 3, time.Minute)
		require.Len(t, claimed, 3)
		n, err = store.SubscriptionSeek(e.ctx, e.pool, s, store.StartPosition{Earliest: true})
		require.NoError(t, err)
		require.EqualValues(t, len(all), n)
		require.EqualValues(t, len(all), e.live(s.Queue))
		require.Equal(t, []bool{false, false, false}, e.ack(s.Queue, receipts(claimed)...))

		n, err = store.SubscriptionSeek(e.ctx, e.pool, s, store.StartPosition{Time: &cut})
		require.NoError(t, err)
		want := map[string]bool{"late1": true, "late2": true}
		for id := range fromCut {
			want[id] = true
		}
		require.EqualValues(t, len(want), n)
		requireSameSet(t, want, e.deliveredIDs(s.ID), "after seek to a time")

		claimed = e.claim(s.Queue, 2, time.Minute)
		require.Len(t, claimed, 2)
		n, err = store.SubscriptionSeek(e.ctx, e.pool, s, store.StartPosition{})
		require.NoError(t, err)
		require.Zero(t, n)
		require.Zero(t, e.live(s.Queue))
		e.requireCountersExact(s.Queue)
		require.Equal(t, []bool{false, false}, e.ack(s.Queue, receipts(claimed)...))

		// After a seek to latest, only new events.
		e.publish(tp, store.PublishEvent{ID: "later", Type: "a.z"})
		requireSameSet(t, setOf("later"), e.deliveredIDs(s.ID), "after seek to latest")
	})
}

// A seek of an unordered subscription deletes and backfills in batches
// while publishes go on: afterwards every event of the log is pending
// exactly once (none lost from the publishes that ran during the seek,
// none doubled), and receipts from before the seek are stale.
func TestSeekInBatchesWhilePublishing(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	s, _, _, err := store.SubscriptionUpsert(e.ctx, e.pool, tp, "all", store.SubscriptionPatch{})
	require.NoError(t, err)
	keys := keysFor(2)
	const before = 11_000
	publishBacklog(e, tp, keys, before)
	claimed := e.claim(s.Queue, 10, time.Minute)
	require.Len(t, claimed, 10)

	stop := publishing(t, 1, func(_, i int) error {
		_, _, err := store.EventPublish(e.ctx, e.pool, tp, []store.PublishEvent{eventWithKey(fmt.Sprintf("new-%05d", i), keys[i%2])})
		return err
	})
	_, err = store.SubscriptionSeek(e.ctx, e.pool, s, store.StartPosition{Earliest: true})
	require.NoError(t, err)
	stop()

	var total, distinct, logged int64
	require.NoError(t, e.pool.QueryRow(e.ctx, `
		SELECT count(*), count(DISTINCT (event_partition, event_offset)) FROM ferry.messages WHERE queue_id = $1`, s.ID).Scan(&total, &distinct))
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID).Scan(&logged))
	require.Equal(t, logged, total, "every event of the log is pending after the seek")
	require.Equal(t, total, distinct, "none twice")
	receipts := make([]store.Receipt, len(claimed))
	for i, m := range claimed {
		receipts[i] = m.Receipt
	}
	for _, ok := range e.ack(s.Queue, receipts...) {
		require.False(t, ok, "a receipt from before the seek is stale")
	}
}
