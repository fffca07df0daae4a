package main

import (
	"context"
	"math"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func ms(v ...int) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x) * time.Millisecond
	}
	return d
}

func TestPercentileIsTheNearestRank(t *testing.T) {
	t.Parallel()
	sorted := ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	for p, want := range map[float64]int{1: 1, 10: 1, 11: 2, 50: 5, 50.1: 6, 90: 9, 99: 10, 100: 10} {
		require.Equal(t, time.Duration(want)*time.Millisecond, Percentile(sorted, p), "p%v", p)
	}
	require.Equal(t, 7*time.Millisecond, Percentile(ms(7), 1), "one value is every percentile")
	require.Equal(t, 7*time.Millisecond, Percentile(ms(7), 100))
	require.Zero(t, Percentile(nil, 50))
}

func TestSummarizeSortsACopy(t *testing.T) {
	t.Parallel()
	d := ms(30, 10, 20, 40, 1000, 50, 60, 70, 80, 90)
	s := Summarize(d)
	require.Equal(t, Summary{N: 10, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: time.Second, Max: time.Second,
		Mean: 145 * time.Millisecond}, s)
	require.Equal(t, ms(30, 10, 20, 40, 1000, 50, 60, 70, 80, 90), d, "the input is left as it was")
	require.Equal(t, Summary{}, Summarize(nil))
}

func TestRatePerSecond(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 250.0, Rate{Count: 500, Elapsed: 2 * time.Second}.PerSecond(), 1e-9)
	require.Zero(t, Rate{Count: 500}.PerSecond(), "an empty window has no rate")
	p := Phase{Messages: 1000, Elapsed: 4 * time.Second, WALBytes: 250_000, WriteXacts: 20}
	require.InDelta(t, 250.0, p.Rate(), 1e-9)
	require.InDelta(t, 250.0, p.WALPerMessage(), 1e-9)
	require.InDelta(t, 0.02, p.XactsPerMessage(), 1e-9)
	require.Zero(t, Phase{WALBytes: 10}.WALPerMessage(), "nothing moved: no per-message figure")
}

func TestPhaseMergeAddsCountsAndWeighsCPUByTime(t *testing.T) {
	t.Parallel()
	a := Phase{Messages: 100, Elapsed: time.Second, Latencies: ms(1, 2), WALBytes: 10, WriteXacts: 1,
		CPU: CPUUsage{Self: 1, PG: 2, Other: 0.5, IRQ: 0.1}, Waits: Waits{Samples: 2, Events: map[string]int{"CPU": 4}}}
	b := Phase{Messages: 300, Elapsed: 3 * time.Second, Latencies: ms(3), WALBytes: 30, WriteXacts: 3, Drained: true,
		CPU: CPUUsage{Self: 2, PG: 1, Other: 0.1, IRQ: 0.3, PGKnown: true}, Waits: Waits{Samples: 1, Events: map[string]int{"IO:DataFileRead": 1}}}
	m := a.Merge(b)
	require.EqualValues(t, 400, m.Messages)
	require.Equal(t, 4*time.Second, m.Elapsed)
	require.Equal(t, ms(1, 2, 3), m.Latencies)
	require.EqualValues(t, 40, m.WALBytes)
	require.EqualValues(t, 4, m.WriteXacts)
	require.True(t, m.Drained)
	require.True(t, m.CPU.PGKnown)
	require.InDelta(t, (1*1+2*3)/4.0, m.CPU.Self, 1e-9, "weighted by each phase's time")
	require.InDelta(t, (2*1+1*3)/4.0, m.CPU.PG, 1e-9)
	require.InDelta(t, (0.1*1+0.3*3)/4.0, m.CPU.IRQ, 1e-9)
	require.InDelta(t, 100.0, m.Rate(), 1e-9)
	require.Equal(t, ms(1, 2), a.Latencies, "merging leaves the phases alone")
	require.Equal(t, a, Phase{}.Merge(a), "the empty phase is neutral")
}

func TestRatiosRenderOrDash(t *testing.T) {
	t.Parallel()
	require.Equal(t, "0.84×", fmtRatio(84, 100))
	require.Equal(t, "—", fmtRatio(1, 0))
	require.Equal(t, "1.50×", ratioOf(3, 2))
	require.Equal(t, "—", ratioOf(3, 0))
	require.Equal(t, "—", ratioOf(math.NaN(), 2))
	require.Equal(t, "—", ratioOf(2, math.Inf(1)))
	require.Equal(t, "—", ratioOf(math.Inf(-1), 2))
}

func TestFormats(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234567: "-1,234,567", -12: "-12"} {
		require.Equal(t, want, fmtInt(n))
	}
	require.Equal(t, "1,235 msgs/s", fmtRate(1234.6))
	require.Equal(t, "40 events/s", fmtRateOf(40.2, events))
	require.Equal(t, "—", fmtRateOf(math.NaN(), messages), "0 in an empty window")
	require.Equal(t, "—", fmtRateOf(math.Inf(1), messages))
	require.Equal(t, "2.50 ms", fmtMs(2500*time.Microsecond))
	require.Equal(t, "12.5 ms", fmtMs(12500*time.Microsecond))
	require.Equal(t, "147 ms", fmtMs(147*time.Millisecond))
	require.Equal(t, "460 KiB", fmtBytes(460<<10))
	require.Equal(t, "1.5 MiB", fmtBytes(3<<19))
	require.Equal(t, "10k", depthName(10_000))
	require.Equal(t, "1M", depthName(1_000_000))
	require.Equal(t, "1,500", depthName(1500))
	require.Equal(t, "PG 1.20 · bench 0.40 · other 0.02 (IRQ 0.01)", fmtCPU(CPUUsage{PG: 1.2, Self: 0.4, Other: 0.02, IRQ: 0.01, PGKnown: true}))
	require.Equal(t, "PG n/a · bench 0.40 · other 0.00 (IRQ 0.00)", fmtCPU(CPUUsage{PG: 1.2, Self: 0.4}))
}

func TestThroughputRowsCompareTheRatioWithTheTarget(t *testing.T) {
	t.Parallel()
	raw := Phase{Messages: 2000, Elapsed: time.Second}
	ferry := Phase{Messages: 1500, Elapsed: time.Second}
	rows := throughputRows("send throughput", raw, ferry, []float64{0.7, 0.8}, 0.5)
	require.Equal(t, Row{Metric: "send throughput", Raw: "2,000 msgs/s", Ferry: "1,500 msgs/s", Ratio: "0.75×", Target: "≥ 0.5×", Pass: pass(true)}, rows[0])
	require.Equal(t, "0.70 · 0.80", rows[1].Ratio, "the noise of each round pair")
	require.Equal(t, "✗", throughputRows("m", raw, ferry, nil, 1.5)[0].check())
	empty := throughputRows("m", Phase{}, ferry, nil, 0.5)[0]
	require.Equal(t, "—", empty.Ratio, "no raw rate, no ratio")
	require.Equal(t, "✗", empty.check())

	pub := publishRows("publish throughput", raw, ferry, nil)
	require.Equal(t, "2,000 events/s", pub[0].Raw)
	require.Equal(t, "—", pub[0].Target)
	require.Nil(t, pub[0].Pass, "publishing has no target")
}

func TestEvidenceRowsArePerUnitMoved(t *testing.T) {
	t.Parallel()
	raw := Phase{Messages: 1000, Elapsed: time.Second, WALBytes: 500_000, WriteXacts: 1000, CPU: CPUUsage{PG: 1, Self: 0.5, PGKnown: true}}
	ferry := Phase{Messages: 2000, Elapsed: time.Second, WALBytes: 600_000, WriteXacts: 100, CPU: CPUUsage{PG: 1, Self: 1, PGKnown: true}}
	rows := evidenceRows(raw, ferry)
	byMetric := map[string]Row{}
	for _, r := range rows {
		byMetric[r.Metric] = r
	}
	pg := byMetric["PostgreSQL CPU-ms per 1,000 msgs"]
	require.Equal(t, "1000", pg.Raw, "1 core for 1,000 msgs/s: 1 s of CPU per 1,000")
	require.Equal(t, "500", pg.Ferry)
	require.Equal(t, "0.50×", pg.Ratio)
	wal := byMetric["WAL bytes per message"]
	require.Equal(t, "500", wal.Raw)
	require.Equal(t, "300", wal.Ferry)
	require.Equal(t, "0.60×", wal.Ratio)
	x := byMetric["write transactions per message"]
	require.Equal(t, "1.000", x.Raw)
	require.Equal(t, "0.050", x.Ferry)
	require.Equal(t, "n/a", cpuPer(1, raw, false), "PostgreSQL's CPU is unknown on a server that is not ours")
	require.Equal(t, "—", cpuPer(1, Phase{}, true))
}

func TestEvidenceRowsSplitTheBenchProcess(t *testing.T) {
	t.Parallel()
	raw := Phase{Messages: 1000, Elapsed: time.Second, CPU: CPUUsage{Self: 0.5, Client: 0.45, ClientKnown: true}}
	ferry := Phase{Messages: 1000, Elapsed: time.Second, CPU: CPUUsage{Self: 1, Client: 0.25}}
	byMetric := map[string]Row{}
	for _, r := range evidenceRows(raw, ferry) {
		byMetric[r.Metric] = r
	}
	client := byMetric["· of which the load generator (pprof label role=client)"]
	server := byMetric["· of which Ferry's server (the rest: handlers, engine, pgx, GC)"]
	require.Equal(t, "450", client.Raw)
	require.Equal(t, "50", server.Raw)
	require.Equal(t, "n/a", client.Ferry, "a window without its profile has no split")
	require.Equal(t, "n/a", server.Ferry)
}

func TestClientShareSplitsByLabel(t *testing.T) {
	// Not parallel: a process runs one CPU profile at a time.
	share := startClientShare()
	require.True(t, share.on)
	require.False(t, startClientShare().on, "a second profile at once is refused, and its split unknown")
	spin := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
	}
	done := make(chan struct{})
	go pprof.Do(context.Background(), pprof.Labels("role", "client"), func(context.Context) {
		spin(300 * time.Millisecond)
		close(done)
	})
	spin(100 * time.Millisecond)
	<-done
	frac, ok := share.stop()
	require.True(t, ok)
	require.Greater(t, frac, 0.5, "three quarters of the sampled time ran labelled role=client")
	require.Less(t, frac, 0.95, "the unlabelled spin counts as the server's")
}

func TestMergeKeepsTheSplit(t *testing.T) {
	t.Parallel()
	round := Phase{Messages: 10, Elapsed: time.Second, CPU: CPUUsage{Self: 1, Client: 0.5, ClientKnown: true}}
	merged := Phase{}.Merge(round).Merge(round)
	require.True(t, merged.CPU.ClientKnown, "rounds merged into an empty phase keep their split")
	require.InDelta(t, 0.5, merged.CPU.Client, 1e-9)
	unknown := round
	unknown.CPU.ClientKnown = false
	require.False(t, merged.Merge(unknown).CPU.ClientKnown, "a round without its profile makes the split unknown")
	require.False(t, Phase{}.Merge(Phase{}).CPU.ClientKnown)
}
