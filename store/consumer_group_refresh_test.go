package store_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Retention removed events the group had not read: the next poll moves
// the committed offset to before the oldest retained event, counts the
// events skipped once (in the poll's answer and the partition's
// expired_skipped), and reads on from the oldest retained event.
func TestGroupRetentionFixUp(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	a := e.gpoll(tp, "g", "a", 100) // creates the group at -1
	require.Empty(t, a.Events)
	r0 := e.publishTo(tp, 0, 10)
	e.publishTo(tp, 1, 3)
	_, err := e.pool.Exec(e.ctx, `DELETE FROM ferry.events WHERE topic_id = $1 AND partition = 0 AND "offset" < 5`, tp.ID)
	require.NoError(t, err)

	a1 := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, int64(5), a1.Skipped)
	require.Equal(t, map[int][]int64{0: span(5, 9), 1: span(0, 2)}, byPartition(a1.Events))
	require.Subset(t, eventIDs(a1.Events), publishedIDs(r0[5:]))
	g := e.gdescribe(tp, "g")
	require.Zero(t, g.Refresh.Skipped)
	require.Equal(t, int64(4), g.Partitions[0].CommittedOffset)
	require.Equal(t, int64(5), g.Partitions[0].ExpiredSkipped)
	require.Equal(t, int64(5), g.Partitions[0].Lag)
	require.Equal(t, int64(-1), g.Partitions[1].CommittedOffset)
	require.Zero(t, g.Partitions[1].ExpiredSkipped)

	a2 := e.gpoll(tp, "g", "a", 100)
	require.Zero(t, a2.Skipped, "counted once")
	require.Empty(t, a2.Events)
	g = e.gdescribe(tp, "g")
	require.Equal(t, int64(5), g.Partitions[0].ExpiredSkipped)
	require.Equal(t, int64(4), g.Partitions[0].CommittedOffset)
}

// The retention fix-up never moves a committed offset back: a commit that
// lands while a refresh is moving the position up to the oldest retained
// event (here: after the refresh's snapshot, before it gets the row) is
// kept.
func TestGroupRetentionFixUpKeepsConcurrentCommit(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 1)
	e.gpoll(tp, "g", "a", 100) // creates the group at -1
	e.publishTo(tp, 0, 10)
	a := e.gpoll(tp, "g", "a", 100)
	require.Len(t, a.Events, 10) // read, not committed yet
	_, err := e.pool.Exec(e.ctx, `DELETE FROM ferry.events WHERE topic_id = $1 AND "offset" < 5`, tp.ID)
	require.NoError(t, err)

	// A transaction holds the group's partition row; a describe's refresh
	// waits for it in its fix-up.
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	_, err = tx.Exec(e.ctx, `SELECT 1 FROM ferry.group_partitions WHERE group_id = $1 FOR UPDATE`, e.groupID(tp, "g"))
	require.NoError(t, err)
	describePool := e.newNamedPool(2, "describer")
	out := make(chan store.ConsumerGroup, 1)
	go func() {
		g, err := store.ConsumerGroupDescribe(e.ctx, describePool, tp, "g")
		assertNoErr(t, err, "describe")
		out <- g
	}()
	e.activityWaitingEventually("describer")
	// a's commit, in that transaction, commits first.
	require.NoError(t, store.ConsumerGroupCommit(e.ctx, tx, store.ConsumerGroupCommitParams{
		Topic: tp, Group: "g", Consumer: "a", Generation: a.Generation, Offsets: map[int]int64{0: 7},
	}))
	require.NoError(t, tx.Commit(e.ctx))
	g := <-out
	t.Logf("describe saw: committed %d, skipped %d", g.Partitions[0].CommittedOffset, g.Refresh.Skipped)
	after := e.gdescribe(tp, "g").Partitions[0]
	require.Equal(t, int64(7), after.CommittedOffset, "a's commit was undone")
	require.Contains(t, []int64{0, 5}, after.ExpiredSkipped)
}

// Partitions added to the topic join the group at their beginning (even
// when the group started at the latest event) on the next poll, and the
// assignment covers them.
func TestGroupTopicGrows(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	e.publishTo(tp, 0, 2)
	e.publishTo(tp, 1, 2)
	a := e.gpollStart(tp, "g", "a", store.StartPosition{}, 100) // at the latest
	require.Empty(t, a.Events)
	b := e.gpollStart(tp, "g", "b", store.StartPosition{}, 100)
	require.Empty(t, b.Events)
	require.Len(t, b.Partitions, 1)
	require.Equal(t, []int64{1, 1}, e.committedOffsets(tp, "g"))

	tp4, created, err := store.TopicUpsert(e.ctx, e.pool, "log", store.TopicPatch{Partitions: ptr(4)})
	require.NoError(t, err)
	require.False(t, created)
	r2 := e.publishTo(tp4, 2, 2)
	r3 := e.publishTo(tp4, 3, 3)

	a2 := e.gpoll(tp4, "g", "a", 100)
	require.True(t, a2.Rebalanced)
	require.Greater(t, a2.Generation, b.Generation)
	require.Len(t, a2.Partitions, 2)
	g := e.gdescribe(tp4, "g")
	require.Len(t, g.Partitions, 4)
	require.Equal(t, []int64{1, 1, -1, -1}, e.committedOffsets(tp4, "g"))
	b2 := e.gpoll(tp4, "g", "b", 100)
	require.Equal(t, a2.Generation, b2.Generation)
	require.Len(t, b2.Partitions, 2)
	require.ElementsMatch(t, []int{0, 1, 2, 3}, append(slices.Clone(a2.Partitions), b2.Partitions...))
	aKept := 1 - b.Partitions[0] // of partitions 0 and 1, the one b did not take
	require.Contains(t, a2.Partitions, aKept, "sticky")
	require.Contains(t, b2.Partitions, b.Partitions[0], "sticky")

	got := byPartition(append(slices.Clone(a2.Events), b2.Events...))
	require.Equal(t, map[int][]int64{2: span(0, 1), 3: span(0, 2)}, got)
	require.ElementsMatch(t, append(publishedIDs(r2), publishedIDs(r3)...), eventIDs(append(slices.Clone(a2.Events), b2.Events...)))
}
