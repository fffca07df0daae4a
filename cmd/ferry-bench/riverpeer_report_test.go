package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRiverPeerSectionPutsRiverLeftAndFerryRight(t *testing.T) {
	t.Parallel()
	sec := time.Second
	r := peerResult{
		insert: sidesResult{river: Phase{Messages: 20_000, Elapsed: sec}, ferry: Phase{Messages: 30_000, Elapsed: sec}, pairs: []float64{1.4, 1.6}},
		work: sidesResult{river: Phase{Messages: 10_000, Elapsed: sec}, ferry: Phase{Messages: 5_000, Elapsed: sec}, pairs: []float64{0.5, 0.5},
			tuned: Phase{Messages: 20_000, Elapsed: sec}},
		backlog: 100_000,
		latency: [2]peerLatency{
			{sent: 10_000, handed: 10_000, done: 9_990, handedAt: Summary{N: 1, P50: 50 * time.Millisecond, P99: 100 * time.Millisecond},
				doneAt: Summary{N: 1, P50: 100 * time.Millisecond, P99: 200 * time.Millisecond}},
			{sent: 10_000, handed: 10_000, done: 10_000, handedAt: Summary{N: 1, P50: 5 * time.Millisecond, P99: 10 * time.Millisecond},
				doneAt: Summary{N: 1, P50: 10 * time.Millisecond, P99: 20 * time.Millisecond}},
		},
		tuned: peerLatency{sent: 10_000, done: 10_000, doneAt: Summary{N: 1, P50: 10 * time.Millisecond, P99: 40 * time.Millisecond}},
	}
	s := riverPeerSection(r, "how")
	require.Equal(t, Columns{Raw: "River", Ferry: "Ferry", Ratio: "Ferry/River"}, s.columns())
	require.Equal(t, "how", s.How)

	byMetric := map[string]Row{}
	var headlines []string
	for _, row := range s.Rows {
		byMetric[row.Metric] = row
		if row.Target != "" {
			headlines = append(headlines, row.Metric)
			require.Nil(t, row.Pass, "a peer has no target to pass")
		}
	}
	require.Equal(t, []string{
		"insert: batches of 500, 8 clients, jobs (messages)/s",
		"work: a backlog of 100,000 drained, jobs (messages)/s",
		"at 1,000/s: insert (send) → River completion event (Ferry ack answered) p99",
	}, headlines, "the summary shows the two rates and the completion p99")

	ins := byMetric["insert: batches of 500, 8 clients, jobs (messages)/s"]
	require.Equal(t, []string{"20,000 msgs/s", "30,000 msgs/s", "1.50×"}, []string{ins.Raw, ins.Ferry, ins.Ratio})
	work := byMetric["work: a backlog of 100,000 drained, jobs (messages)/s"]
	require.Equal(t, []string{"10,000 msgs/s", "5,000 msgs/s", "0.50×"}, []string{work.Raw, work.Ferry, work.Ratio})
	p99 := byMetric["at 1,000/s: insert (send) → River completion event (Ferry ack answered) p99"]
	require.Equal(t, []string{"200 ms", "20.0 ms", "0.10×"}, []string{p99.Raw, p99.Ferry, p99.Ratio})
	require.Equal(t, "9,990 of 10,000", byMetric["at 1,000/s: completed of those inserted (sent)"].Raw)
	tuned := byMetric["at 1,000/s, River FetchCooldown 1ms: insert (send) → River completion event (Ferry ack answered) p99"]
	require.Equal(t, []string{"40.0 ms", "20.0 ms", "0.50×"}, []string{tuned.Raw, tuned.Ferry, tuned.Ratio}, "the tuned River run against the same Ferry run")
	require.Equal(t, "1.40 · 1.60", s.Rows[1].Ratio)
	tw := byMetric["work, River FetchCooldown 1ms (one run, after the rounds): jobs (messages)/s"]
	require.Equal(t, []string{"20,000 msgs/s", "5,000 msgs/s", "0.25×"}, []string{tw.Raw, tw.Ferry, tw.Ratio})
	require.Contains(t, s.Notes[0], "at most 100 × (1 s / 100 ms) = 1,000 jobs/s")

	md := (&Report{Sections: []*Section{s}}).Markdown()
	require.Contains(t, md, "| metric | River | Ferry | Ferry/River | target | |")
	require.Contains(t, md, "River: 20,000 msgs/s | Ferry: 30,000 msgs/s | Ferry/River: 1.50×", "the summary labels the cells")
}
