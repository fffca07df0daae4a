package store_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Fencing: once a member joins and takes partitions over, the first
// member's commits naming the old generation are refused for the moved
// partitions — the whole request, including the partitions it kept — and
// accepted for the kept ones alone. Commits naming a future generation,
// by non-members or for partitions one got only later are refused;
// offsets beyond the head are a validation error; nothing refused writes.
func TestGroupCommitFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp := e.filledTopic("log", 4, 5) // offsets 0..4
	none := []int64{-1, -1, -1, -1}

	a1 := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, []int{0, 1, 2, 3}, a1.Partitions)
	require.Len(t, a1.Events, 20)
	require.True(t, a1.Rebalanced)
	g1 := a1.Generation

	b := e.gpoll(tp, "g", "b", 100)
	g2 := b.Generation
	require.Greater(t, g2, g1)
	require.True(t, b.Rebalanced)
	require.Len(t, b.Partitions, 2)
	var kept []int
	for p := range 4 {
		if !slices.Contains(b.Partitions, p) {
			kept = append(kept, p)
		}
	}
	moved := b.Partitions
	// b starts its partitions at committed + 1: a committed nothing.
	got := byPartition(b.Events)
	require.Len(t, got, 2)
	for _, p := range moved {
		require.Equal(t, span(0, 4), got[p], "partition %d", p)
	}

	// a, a zombie for the moved partitions: refused as a whole.
	err := e.gcommit(tp, "g", "a", g1, map[int]int64{moved[0]: 4, kept[0]: 4, kept[1]: 4})
	require.ErrorIs(t, err, store.ErrFenced)
	require.ErrorIs(t, err, store.ErrConflict)
	require.Equal(t, none, e.committedOffsets(tp, "g"), "all or nothing: the kept partitions are not committed either")
	require.ErrorIs(t, e.gcommit(tp, "g", "a", g1, map[int]int64{moved[1]: 2}), store.ErrFenced)
	require.ErrorIs(t, e.gcommit(tp, "g", "a", g2, map[int]int64{moved[1]: 2}), store.ErrFenced, "not a's in the current generation either")
	require.Equal(t, none, e.committedOffsets(tp, "g"))

	// The partitions a kept, naming the generation of its batch: accepted.
	require.NoError(t, e.gcommit(tp, "g", "a", g1, map[int]int64{kept[0]: 4, kept[1]: 2}))
	want := slices.Clone(none)
	want[kept[0]], want[kept[1]] = 4, 2
	require.Equal(t, want, e.committedOffsets(tp, "g"))
	require.NoError(t, e.gcommit(tp, "g", "a", g2, map[int]int64{kept[1]: 3}), "the current generation")
	want[kept[1]] = 3

	// b got its partitions in g2: naming g1 is fenced, g2 accepted.
	require.ErrorIs(t, e.gcommit(tp, "g", "b", g1, map[int]int64{moved[0]: 1}), store.ErrFenced)
	require.NoError(t, e.gcommit(tp, "g", "b", g2, map[int]int64{moved[0]: 1}))
	want[moved[0]] = 1
	require.Equal(t, want, e.committedOffsets(tp, "g"))

	// A generation that does not exist yet.
	require.ErrorIs(t, e.gcommit(tp, "g", "a", g2+1, map[int]int64{kept[1]: 4}), store.ErrFenced)
	// Beyond the head (4), or no such partition: invalid, nothing written.
	requireValidation(t, e.gcommit(tp, "g", "a", g2, map[int]int64{kept[0]: 4, kept[1]: 5}), fmt.Sprintf("offsets.%d", kept[1]))
	requireValidation(t, e.gcommit(tp, "g", "a", g2, map[int]int64{kept[1]: 4, 9: 0}), "offsets.9")
	// A consumer that is not a member.
	require.ErrorIs(t, e.gcommit(tp, "g", "zed", g2, map[int]int64{kept[1]: 4}), store.ErrFenced)
	require.Equal(t, want, e.committedOffsets(tp, "g"))
	// A group that does not exist.
	require.ErrorIs(t, e.gcommit(tp, "nope", "a", g2, map[int]int64{0: 0}), store.ErrNotFound)

	// a's next poll is in g2, with its kept partitions only.
	a2 := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, g2, a2.Generation)
	require.False(t, a2.Rebalanced)
	require.Equal(t, kept, a2.Partitions)
	require.Empty(t, a2.Events, "a read them in g1 already")
}

// A partition's new owner starts after the committed offset as it is
// when the partition moves, also when the previous owner's commit lands
// while the rebalance is under way (after the rebalancing poll read the
// group, before it moved the partition): the new owner never gets events
// the group already committed.
func TestGroupNewOwnerStartsAfterConcurrentCommit(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	e.publishTo(tp, 0, 5)
	e.publishTo(tp, 1, 5)
	a := e.gpoll(tp, "g", "a", 100)
	require.Len(t, a.Events, 10)

	// b joins; its poll stops just before it hands a partition over.
	pool, h, release := e.heldPool("SET owner = m.owner")
	bOut := make(chan store.ConsumerGroupPollResult, 1)
	go func() {
		res, err := store.ConsumerGroupPoll(e.ctx, pool, nil, store.ConsumerGroupPollParams{
			Topic: tp, Group: "g", Consumer: "b", SessionTimeout: groupSession, Max: 100,
		})
		assertNoErr(t, err, "b's poll")
		bOut <- res
	}()
	select {
	case <-h.arrived:
	case res := <-bOut:
		t.Fatalf("b's poll ended without moving a partition: %+v", res)
	}

	// a commits everything it read, naming its generation. It may get
	// through now (a still owns both partitions) or wait for b's poll (and
	// then be fenced, as b took one): either is right.
	commitPool := e.newNamedPool(2, "committer")
	commitOut := make(chan error, 1)
	go func() {
		commitOut <- store.ConsumerGroupCommit(e.ctx, commitPool, store.ConsumerGroupCommitParams{
			Topic: tp, Group: "g", Consumer: "a", Generation: a.Generation, Offsets: map[int]int64{0: 4, 1: 4},
		})
	}()
	outcome, _ := doneOrWaiting(t, commitOut, func() (int, error) { return e.lockWaiters("committer") },
		"a's commit neither ended nor waited")
	release()
	b := <-bOut
	commitErr := outcome()
	if commitErr != nil {
		require.ErrorIs(t, commitErr, store.ErrFenced)
	}
	t.Logf("a's commit: %v", commitErr)

	require.Len(t, b.Partitions, 1)
	moved := b.Partitions[0]
	committed := e.committedOffsets(tp, "g")[moved]
	got := byPartition(b.Events)[moved]
	require.Equal(t, span(committed+1, 4), append([]int64{}, got...),
		"b's first events of partition %d, committed %d (a's commit: %v)", moved, committed, commitErr)
}

// Commits only move forward; a seek to the earliest event moves back (to
// before the oldest retained event), bumps the generation, fences batches
// read before it, and the members' next fetch starts there.
func TestGroupCommitMonotonicAndSeekEarliest(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 1)
	e.publishTo(tp, 0, 10)

	a := e.gpoll(tp, "g", "a", 100)
	require.Len(t, a.Events, 10)
	require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 8}))
	require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 3}), "a lower offset is no error")
	require.Equal(t, []int64{8}, e.committedOffsets(tp, "g"), "and changes nothing")

	require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Start: store.StartPosition{Earliest: true}}))
	g := e.gdescribe(tp, "g")
	require.Equal(t, a.Generation+1, g.Generation)
	require.Equal(t, int64(-1), g.Partitions[0].CommittedOffset)
	require.Equal(t, int64(10), g.Partitions[0].Lag)
	require.ErrorIs(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 9}), store.ErrFenced, "a batch read before the seek")
	require.Equal(t, int64(-1), e.committedOffsets(tp, "g")[0])

	a2 := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, g.Generation, a2.Generation)
	require.Equal(t, span(0, 9), eventOffsets(a2.Events))
	require.NoError(t, e.gcommit(tp, "g", "a", a2.Generation, map[int]int64{0: 9}))

	// With the oldest events gone, earliest is the oldest retained: no
	// event counts as skipped by retention.
	_, err := e.pool.Exec(e.ctx, `DELETE FROM ferry.events WHERE topic_id = $1 AND partition = 0 AND "offset" < 3`, tp.ID)
	require.NoError(t, err)
	require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Start: store.StartPosition{Earliest: true}}))
	a3 := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, a2.Generation+1, a3.Generation)
	require.Zero(t, a3.Skipped)
	require.Equal(t, span(3, 9), eventOffsets(a3.Events))
	g = e.gdescribe(tp, "g")
	require.Equal(t, int64(2), g.Partitions[0].CommittedOffset)
	require.Zero(t, g.Partitions[0].ExpiredSkipped)

	// Seeking a group that does not exist.
	err = store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "nope", Start: store.StartPosition{Earliest: true}})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestGroupSeek(t *testing.T) {
	t.Parallel()

	// Latest: the next poll returns nothing until a publish, then exactly
	// the new events.
	t.Run("Latest", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "log", 2)
		e.publishTo(tp, 0, 3)
		e.publishTo(tp, 1, 4)
		// The group is read halfway: nothing committed, a batch pending.
		a := e.gpoll(tp, "g", "a", 2)
		require.Len(t, a.Events, 2)

		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Latest: true}))
		g := e.gdescribe(tp, "g")
		require.Equal(t, a.Generation+1, g.Generation)
		require.Equal(t, []int64{2, 3}, e.committedOffsets(tp, "g"))
		for _, p := range g.Partitions {
			require.Zero(t, p.Lag)
		}
		a2 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, g.Generation, a2.Generation)
		require.Empty(t, a2.Events)

		r0 := e.publishTo(tp, 0, 2)
		r1 := e.publishTo(tp, 1, 1)
		a3 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, map[int][]int64{0: {3, 4}, 1: {4}}, byPartition(a3.Events))
		require.ElementsMatch(t, append(publishedIDs(r0), publishedIDs(r1)...), eventIDs(a3.Events))
		require.Empty(t, e.gpoll(tp, "g", "a", 100).Events)
	})

	// Time: per partition, the first event published at or after it; a
	// time after every event is the next offset.
	t.Run("Time", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "log", 2)
		// Three publishes (three publish times), of different sizes per
		// partition.
		for i := range 3 {
			e.publishTo(tp, 0, 1+i)
			e.publishTo(tp, 1, 3-i)
		}
		a := e.gpoll(tp, "g", "a", 100)
		all := map[int][]store.Event{}
		for _, ev := range a.Events {
			all[ev.Partition] = append(all[ev.Partition], ev)
		}
		require.Len(t, all[0], 6)
		require.Len(t, all[1], 6)
		require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 5, 1: 5}))
		// The second publish to partition 1 (offsets 3, 4).
		at := all[1][3].PublishedAt
		require.True(t, all[1][2].PublishedAt.Before(at))
		wantFrom := map[int]int64{}
		for p, evs := range all {
			wantFrom[p] = int64(len(evs))
			for _, ev := range evs {
				if !ev.PublishedAt.Before(at) {
					wantFrom[p] = ev.Offset
					break
				}
			}
		}
		require.Equal(t, int64(3), wantFrom[1])
		require.Less(t, wantFrom[0], int64(6))

		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Start: store.StartPosition{Time: &at}}))
		require.Equal(t, []int64{wantFrom[0] - 1, wantFrom[1] - 1}, e.committedOffsets(tp, "g"))
		a2 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, map[int][]int64{0: span(wantFrom[0], 5), 1: span(wantFrom[1], 5)}, byPartition(a2.Events))

		later := all[0][5].PublishedAt.Add(time.Hour)
		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Start: store.StartPosition{Time: &later}}))
		require.Equal(t, []int64{5, 5}, e.committedOffsets(tp, "g"))
		require.Empty(t, e.gpoll(tp, "g", "a", 100).Events)
	})

	// Explicit offsets (the next offset to read): only the named
	// partitions move, and only their batches are fenced.
	t.Run("Offsets", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		tp := e.filledTopic("log", 3, 5)
		a := e.gpoll(tp, "g", "a", 100)
		require.Len(t, a.Events, 15)
		require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 3, 1: 4, 2: 4}))

		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Offsets: map[int]int64{1: 2}}))
		require.Equal(t, []int64{3, 1, 4}, e.committedOffsets(tp, "g"))
		require.ErrorIs(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{1: 4}), store.ErrFenced, "partition 1 moved")
		require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 4}), "partition 0 did not")
		a2 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, a.Generation+1, a2.Generation)
		require.Equal(t, map[int][]int64{1: span(2, 4)}, byPartition(a2.Events))
		require.Equal(t, []int64{4, 1, 4}, e.committedOffsets(tp, "g"))

		// Up to the next offset (5) is allowed; beyond it, or a partition
		// the topic lacks, is invalid and changes nothing.
		requireValidation(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Offsets: map[int]int64{0: 0, 2: 6}}), "offsets.2")
		requireValidation(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Offsets: map[int]int64{7: 0}}), "offsets.7")
		require.Equal(t, []int64{4, 1, 4}, e.committedOffsets(tp, "g"))
		require.Equal(t, a2.Generation, e.gdescribe(tp, "g").Generation)
		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Offsets: map[int]int64{1: 5, 2: 0}}))
		require.Equal(t, []int64{4, 4, -1}, e.committedOffsets(tp, "g"))
		require.Equal(t, map[int][]int64{2: span(0, 4)}, byPartition(e.gpoll(tp, "g", "a", 100).Events))
	})
}
