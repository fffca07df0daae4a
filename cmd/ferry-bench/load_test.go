package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

func TestRunBoundedRunsEveryOperationAfterTheWarmUp(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	seen := make([]atomic.Int64, 4)
	res, err := runBounded(context.Background(), "test", 4, 50, 2, time.Now().Add(time.Minute), func(_ context.Context, w int) error {
		calls.Add(1)
		seen[w].Add(1)
		return nil
	})
	require.NoError(t, err)
	require.EqualValues(t, 50+4*2, calls.Load(), "50 recorded operations plus 2 of warm-up per worker")
	for w := range seen {
		require.GreaterOrEqual(t, seen[w].Load(), int64(2), "worker %d ran its warm-up", w)
	}
	require.EqualValues(t, 50, res.Done)
	require.Len(t, res.Latencies, 50)
	require.Zero(t, res.Cut)
	require.False(t, res.OutOfTime)
}

func TestRunBoundedCutsAtTheDeadlineAndRecordsWhatWasCut(t *testing.T) {
	t.Parallel()
	const budget = 200 * time.Millisecond
	var started atomic.Int64
	begin := time.Now()
	// The first 10 operations are quick; then every one hangs until it is
	// cancelled, as a statement that fell off a cliff would.
	res, err := runBounded(context.Background(), "test", 3, 1000, 0, begin.Add(budget), func(ctx context.Context, _ int) error {
		if started.Add(1) <= 10 {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	})
	require.NoError(t, err, "a cut is not an error")
	require.Less(t, time.Since(begin), budget+5*time.Second, "the run ends at its deadline")
	require.True(t, res.OutOfTime)
	require.EqualValues(t, 10, res.Done)
	require.EqualValues(t, 3, res.Cut, "one operation in flight per worker")
	require.Len(t, res.Latencies, 13, "the cut operations are recorded too")
	s := Summarize(res.Latencies)
	require.Greater(t, s.Max, budget/2, "a cut operation counts with the time it had run")
}

func TestRunBoundedStopsAtTheFirstError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var calls atomic.Int64
	_, err := runBounded(context.Background(), "test", 2, 1_000_000, 0, time.Time{}, func(ctx context.Context, _ int) error {
		if calls.Add(1) == 5 {
			return boom
		}
		return ctx.Err()
	})
	require.ErrorIs(t, err, boom)
	require.Less(t, calls.Load(), int64(1_000_000), "the other worker stopped too")
}

func TestRoundsAlternateTheSidesAndMergeEach(t *testing.T) {
	t.Parallel()
	b := &Bench{}
	var order []side
	var lengths []time.Duration
	prepared := 0
	raw, ferry, pairs, err := b.rounds(context.Background(), 4*time.Second, 4, rawSide,
		func(side) error { prepared++; return nil },
		func(s side, d time.Duration) (Phase, error) {
			order = append(order, s)
			lengths = append(lengths, d)
			n := int64(100)
			if s == ferrySide {
				n = 50 * int64(len(order))
			}
			return Phase{Messages: n, Elapsed: time.Second}, nil
		})
	require.NoError(t, err)
	require.Equal(t, []side{rawSide, ferrySide, ferrySide, rawSide, rawSide, ferrySide, ferrySide, rawSide}, order)
	require.Equal(t, 8, prepared, "prepare runs before every round of each side")
	for _, d := range lengths {
		require.Equal(t, time.Second, d, "the time per side is split over the rounds")
	}
	require.EqualValues(t, 400, raw.Messages)
	require.Equal(t, 4*time.Second, raw.Elapsed)
	require.EqualValues(t, 50*(2+3+6+7), ferry.Messages)
	require.Equal(t, []float64{1, 1.5, 3, 3.5}, pairs, "Ferry/raw of each pair of rounds")

	order = nil
	_, _, _, err = b.rounds(context.Background(), time.Second, 1, ferrySide, func(side) error { return nil },
		func(s side, _ time.Duration) (Phase, error) {
			order = append(order, s)
			return Phase{Elapsed: time.Second}, nil
		})
	require.NoError(t, err)
	require.Equal(t, []side{ferrySide, rawSide}, order, "one round, Ferry first")

	boom := errors.New("boom")
	_, _, _, err = b.rounds(context.Background(), time.Second, 2, rawSide, func(side) error { return nil },
		func(s side, _ time.Duration) (Phase, error) {
			if s == ferrySide {
				return Phase{}, boom
			}
			return Phase{}, nil
		})
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "ferry: boom", "the error names the side")
}

func TestNumberedCountsEachWorkersCalls(t *testing.T) {
	t.Parallel()
	var got [][2]int64
	op := numbered(2, func(_ context.Context, w int, i int64) (int, error) {
		got = append(got, [2]int64{int64(w), i})
		return 1, nil
	})
	for _, w := range []int{0, 1, 0, 0, 1} {
		_, _ = op(context.Background(), w)
	}
	require.Equal(t, [][2]int64{{0, 0}, {1, 0}, {0, 1}, {0, 2}, {1, 1}}, got)
}

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
