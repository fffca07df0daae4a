package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// coldRunOf is a complete run with latencies ms milliseconds each.
func coldRunOf(ms ...int) coldRun {
	var r coldRun
	for _, v := range ms {
		r.run.Latencies = append(r.run.Latencies, time.Duration(v)*time.Millisecond)
	}
	r.run.Done = int64(len(ms))
	return r
}

func TestColdRowsCompareColdWithWarmAgainstTheTarget(t *testing.T) {
	t.Parallel()
	m := coldMeasure{name: "queue receive(100)+ack", table: "messages", workers: 16, ops: 4}
	warm := coldRunOf(10, 10, 10, 20)

	ok := coldRows(m, coldRunOf(12, 12, 12, 25), warm)
	require.Equal(t, "queue receive(100)+ack latency p50", ok[0].Metric)
	require.Equal(t, "10.0 ms", ok[0].Raw, "warm in the raw column")
	require.Equal(t, "12.0 ms", ok[0].Ferry, "cold in the Ferry column")
	require.Equal(t, "1.20×", ok[0].Ratio)
	require.Equal(t, "✓", ok[0].check())
	require.Equal(t, "1.25×", ok[1].Ratio, "p99")
	require.Equal(t, "✓", ok[1].check())

	bad := coldRows(m, coldRunOf(380, 400, 420, 4000), warm)
	require.Equal(t, "40.00×", bad[0].Ratio)
	require.Equal(t, "✗", bad[0].check())
	require.Equal(t, "✗", bad[1].check())
}

func TestColdRowsFlagARunThatRanOutOfTime(t *testing.T) {
	t.Parallel()
	m := coldMeasure{name: "queue receive(100)+ack", table: "messages", workers: 16, ops: 800}
	warm := coldRunOf(10, 10, 10, 10)
	warm.run.Done = 800
	// Cut runs are lower bounds: even a ratio within the target fails.
	cold := coldRunOf(11, 11, 11, 11)
	cold.run.OutOfTime, cold.run.Cut, cold.run.Elapsed = true, 16, time.Minute
	rows := coldRows(m, cold, warm)
	require.Equal(t, "≥ 11.0 ms", rows[0].Ferry)
	require.Equal(t, "≥ 1.10×", rows[0].Ratio)
	require.Equal(t, "✗", rows[0].check())
	require.Contains(t, rows[3].Ferry, "4 of 800 in 60.0 s: **time budget ran out**, 16 cut")
	require.Equal(t, "800 in 0.0 s", rows[3].Raw)

	// Nothing measured on one side: no ratio, and a miss.
	none := coldRows(m, coldRunOf(11), coldRun{})
	require.Equal(t, "—", none[0].Ratio)
	require.Equal(t, "✗", none[0].check())
}
