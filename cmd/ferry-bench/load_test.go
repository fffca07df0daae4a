package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
