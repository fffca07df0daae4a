package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestConsoleLists proves what the console's overview reads: queues found
// by part of their name and paged, what needs attention (dead letters
// first), and a topic's subscriptions and groups.
func TestConsoleLists(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	names := []string{e.name("alpha-1"), e.name("alpha-2"), e.name("beta-1")}
	qs := make([]store.Queue, len(names))
	for i, n := range names {
		qs[i] = e.queue(n, store.QueuePatch{})
	}
	part := e.name("alpha")
	got, more, err := store.QueueSearch(e.ctx, e.tx, store.NameSearchParams{Part: part, Limit: 1})
	require.NoError(t, err)
	require.True(t, more)
	require.Equal(t, names[0], got[0].Name)
	got, more, err = store.QueueSearch(e.ctx, e.tx, store.NameSearchParams{Part: part, After: got[0].Name, Limit: 1})
	require.NoError(t, err)
	require.False(t, more)
	require.Equal(t, names[1], got[0].Name)

	e.send(qs[2], msg(0), msg(1))
	e.deadLetter(qs[2], e.claim(qs[2], 2, 60e9), "bad")
	trouble, err := store.TroubleList(e.ctx, e.tx, 1000)
	require.NoError(t, err)
	found := false
	for _, tr := range trouble {
		if tr.Name == names[2] {
			found = true
			require.Equal(t, int64(2), tr.DeadLetters)
		}
		require.NotEqual(t, names[0], tr.Name, "a queue without trouble is not listed")
	}
	require.True(t, found)

	subs, groups, err := store.TopicChildList(e.ctx, e.tx, []int64{-1})
	require.NoError(t, err)
	require.Empty(t, subs)
	require.Empty(t, groups)
}

// TestAttentionLists proves the attention list's other reasons: a queue
// whose oldest message is older than TroubleOldAge is listed with its
// age (a fresh one is not); a group whose lag is at least TroubleLag is
// listed, and so is one whose lag grew by TroubleLagGrowth since its
// sample TroubleLagWindow ago, with the growth; one that grew less, or
// has no sample that old, is not.
func TestAttentionLists(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fresh, stale := e.queue("fresh", store.QueuePatch{}), e.queue("stale", store.QueuePatch{})
	e.send(fresh, msg(0))
	e.send(stale, msg(0), msg(1))
	_, err := e.pool.Exec(e.ctx, `UPDATE ferry.messages SET sent_at = now() - interval '2 hours' WHERE queue_id = $1`, stale.ID)
	require.NoError(t, err)
	trouble, err := store.TroubleList(e.ctx, e.pool, 100)
	require.NoError(t, err)
	require.Len(t, trouble, 1)
	require.Equal(t, "stale", trouble[0].Name)
	require.InDelta(t, 7200, trouble[0].OldestAgeSeconds, 60)

	tp := e.topic("tp", store.TopicPatch{Partitions: ptr(1)})
	for _, g := range []string{"far", "growing", "slower", "young"} {
		e.gpollStart(tp, g, "c", store.StartPosition{Earliest: true}, 0)
	}
	e.publishTo(tp, 0, 150)
	_, err = e.pool.Exec(e.ctx, `
		INSERT INTO ferry.group_samples (group_id, minute, lag)
		SELECT id, date_trunc('minute', now()) - interval '15 minutes', CASE name WHEN 'slower' THEN 100 ELSE 0 END
		FROM ferry.consumer_groups WHERE name IN ('growing', 'slower');
		UPDATE ferry.group_partitions SET committed_offset = -1 - 20000 WHERE group_id = (SELECT id FROM ferry.consumer_groups WHERE name = 'far')`)
	require.NoError(t, err)
	groups, err := store.GroupTroubleList(e.ctx, e.pool, 100)
	require.NoError(t, err)
	require.Len(t, groups, 2, "%+v", groups)
	require.Equal(t, "far", groups[0].Group)
	require.Equal(t, int64(20150), groups[0].Lag)
	require.Equal(t, "growing", groups[1].Group)
	require.Equal(t, int64(150), groups[1].Lag)
	require.Equal(t, int64(150), groups[1].Growth)
	require.WithinDuration(t, time.Now().Add(-15*time.Minute), groups[1].Since, 2*time.Minute)
}
