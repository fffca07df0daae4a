package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

func TestTallyPublishesMeasuresEachPublishAgainstItsArrival(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	at := func(d int) time.Time { return t0.Add(time.Duration(d) * time.Millisecond) }
	a := newArrivals()
	a.record("e1", at(5))
	a.record("e2", at(12))
	a.record("e1", at(30)) // delivered again
	pubs := []timedPublish{
		{id: "e1", sent: at(0), back: at(3)},
		{id: "e2", sent: at(10), back: at(11)},
		{id: "e3", sent: at(20), back: at(22)}, // never arrived
		{id: "e4", sent: at(30), err: errors.New("refused")},
	}
	l := tallyPublishes(pubs, a)
	require.Equal(t, 3, l.published)
	require.Equal(t, 1, l.failed)
	require.Equal(t, 2, l.arrived)
	require.EqualValues(t, 1, l.dups)
	require.Equal(t, 2, l.latency.N)
	require.Equal(t, 2*time.Millisecond, l.latency.P50, "publish start → first arrival")
	require.Equal(t, 5*time.Millisecond, l.latency.Max)
	require.Equal(t, 3, l.publish.N, "every publish answered counts")
	require.Equal(t, 3*time.Millisecond, l.publish.Max)
	require.Equal(t, time.Millisecond, l.after.P50, "publish answered → arrival")
}

func TestArrivalsAwaitStopsAtTheCountTheDeadlineOrTheConsumersError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newArrivals()
	a.record("x", time.Now())
	require.NoError(t, a.await(ctx, 1, time.Now().Add(time.Minute)), "already there")
	begin := time.Now()
	require.NoError(t, a.await(ctx, 2, time.Now().Add(20*time.Millisecond)), "the deadline is not an error: the caller counts")
	require.Less(t, time.Since(begin), 10*time.Second)
	boom := errors.New("boom")
	a.fail(boom)
	a.fail(errors.New("later"))
	require.ErrorIs(t, a.await(ctx, 2, time.Now().Add(time.Minute)), boom, "the consumer's first error")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, a.await(cancelled, 2, time.Now().Add(time.Minute)), context.Canceled)
}

func TestRawEventsAreSortedByPartitionWithTheirOffsetsFromTheEnd(t *testing.T) {
	t.Parallel()
	keys := eventKeys()[:50]
	e := rawEventsOf(keys)
	require.Len(t, e.partitions, 50)
	var counts [topicPartitions]int
	for _, k := range keys {
		counts[store.PartitionForKey(k, topicPartitions)]++
	}
	require.Equal(t, counts, e.counts)
	seen := map[string]bool{}
	for j := range e.partitions {
		p := int(e.partitions[j])
		require.Equal(t, p, store.PartitionForKey(e.keys[j], topicPartitions), "the key's partition")
		if j > 0 {
			require.GreaterOrEqual(t, p, int(e.partitions[j-1]), "sorted by partition")
			if int(e.partitions[j-1]) == p {
				require.Equal(t, e.back[j-1]-1, e.back[j], "a partition's events count back to 1")
			}
		}
		if j == len(e.partitions)-1 || int(e.partitions[j+1]) != p {
			require.EqualValues(t, 1, e.back[j], "the last of a partition lands at next_offset - 1")
		}
		require.False(t, seen[e.ids[j]], "fresh event ids")
		seen[e.ids[j]] = true
	}
	batch := e.bumps(7)
	bumped := 0
	for _, n := range counts {
		if n > 0 {
			bumped++
		}
	}
	require.Equal(t, bumped, batch.Len(), "one bump per partition touched")
}

func TestReadConcurrentlyAddsEveryReadersPart(t *testing.T) {
	t.Parallel()
	var res groupRead
	boom := errors.New("boom")
	err := readConcurrently(3, &res, func(r int, part *groupRead) error {
		part.events, part.requests, part.commits = int64(10*(r+1)), int64(r+1), 1
		part.read = ms(r + 1)
		part.decode = time.Millisecond
		if r == 2 {
			part.fenced = 2
			return boom
		}
		return nil
	})
	require.ErrorIs(t, err, boom)
	require.EqualValues(t, 60, res.events, "a failed reader's part counts too")
	require.EqualValues(t, 6, res.requests)
	require.EqualValues(t, 3, res.commits)
	require.EqualValues(t, 2, res.fenced)
	require.ElementsMatch(t, ms(1, 2, 3), res.read)
	require.Equal(t, 3*time.Millisecond, res.decode)
}
