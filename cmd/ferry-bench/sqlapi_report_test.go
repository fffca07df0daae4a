package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSQLPushRowsJudgeTheSQLSideAgainstRESTsTargets(t *testing.T) {
	t.Parallel()
	lat := func(p50, p99 int) publishLatency {
		return publishLatency{published: 10, arrived: 10,
			latency: Summary{N: 10, P50: ms(p50)[0], P99: ms(p99)[0]}, after: Summary{N: 10, P50: -time.Millisecond}}
	}
	byMetric := func(rows []Row) map[string]Row {
		out := map[string]Row{}
		for _, r := range rows {
			out[r.Metric] = r
		}
		return out
	}
	const p50, p99 = "SQL commit → push delivered: transaction sent → delivered p50", "SQL commit → push delivered: transaction sent → delivered p99"

	// REST (left) misses the targets, SQL meets them: only SQL is judged.
	rows := byMetric(sqlPushRows([2]publishLatency{viaREST: lat(80, 300), viaSQL: lat(40, 200)}))
	require.Equal(t, Row{Metric: p50, Raw: "80.0 ms", Ferry: "40.0 ms", Ratio: "0.50×", Target: "< 50 ms (issue): target met", Pass: pass(true)}, rows[p50])
	require.True(t, *rows[p99].Pass)
	require.Equal(t, "—", rows["SQL commit → push delivered: COMMIT answered → delivered p50"].Ratio, "no ratio of a negative latency")
	require.True(t, *rows["SQL commit → push delivered: events delivered / published"].Pass)

	rows = byMetric(sqlPushRows([2]publishLatency{viaREST: lat(20, 60), viaSQL: lat(50, 260)}))
	require.False(t, *rows[p50].Pass, "50 ms is not under 50 ms")
	require.False(t, *rows[p99].Pass)

	missing := lat(10, 20)
	missing.arrived = 9
	rows = byMetric(sqlPushRows([2]publishLatency{viaREST: lat(20, 60), viaSQL: missing}))
	require.False(t, *rows[p50].Pass, "an event never pushed fails the target however fast the rest")
	require.False(t, *rows["SQL commit → push delivered: events delivered / published"].Pass)
	require.Contains(t, sqlPushNote([2]publishLatency{viaSQL: missing}), "SQL: 0 publishes failed; 1 of 10")
	require.Empty(t, sqlPushNote([2]publishLatency{viaREST: lat(1, 2), viaSQL: lat(1, 2)}))

	rows = byMetric(sqlPushRows([2]publishLatency{}))
	require.False(t, *rows[p50].Pass, "nothing measured meets no target")
}

func TestMergeArrivalsKeepsEveryReceiversFirstArrivals(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	a, b := newArrivals(), newArrivals()
	a.record("a1", t0)
	a.record("a1", t0.Add(time.Second))
	b.record("b1", t0.Add(2*time.Second))
	b.record("b2", t0.Add(3*time.Second))
	m := mergeArrivals(a, b)
	require.EqualValues(t, 3, m.n.Load())
	require.EqualValues(t, 1, m.duplicates())
	at, ok := m.arrival("a1")
	require.True(t, ok)
	require.Equal(t, t0, at, "the first arrival")
	at, _ = m.arrival("b2")
	require.Equal(t, t0.Add(3*time.Second), at)
}

func TestSQLPushSplitComparesTheOfferedRateWithTheClosedLoopRate(t *testing.T) {
	t.Parallel()
	publish := sqlAPIResult{part: "order + ferry.publish, 1 subscription(s)", ferry: Phase{Messages: 400, Elapsed: time.Second}}
	other := sqlAPIResult{part: "order + ferry.publish, 10 subscription(s)", ferry: Phase{Messages: 100, Elapsed: time.Second}}
	capacity := sqlPublishCapacity([]sqlAPIResult{{part: "order + ferry.send"}, other, publish})
	require.InDelta(t, 400, capacity, 1e-9, "the one-subscription part's rate")
	require.Contains(t, sqlPushSplit([2]publishLatency{}, capacity), "offers 200 events/s: 50% of the 400 tx/s")
	require.NotContains(t, sqlPushSplit([2]publishLatency{}, sqlPublishCapacity(nil)), "offers", "no capacity measured, none compared")
}
