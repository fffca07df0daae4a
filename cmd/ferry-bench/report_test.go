package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReportLabelsCellsOfSectionsWithTheirOwnColumns(t *testing.T) {
	t.Parallel()
	rep := &Report{Sections: []*Section{
		{Number: 3, Title: "Receive + ack", Rows: []Row{{Metric: "m", Raw: "1", Ferry: "2", Ratio: "2.00×", Target: "t", Pass: pass(true)}}},
		{Number: 11, Title: "Cold start", Columns: &Columns{Raw: "warm", Ferry: "cold", Ratio: "cold/warm"},
			Rows: []Row{{Metric: "p50", Raw: "5.00 ms", Ferry: "380 ms", Ratio: "76.00×", Target: "≤ 1.5×", Pass: pass(false)}}},
	}}
	md := rep.Markdown()
	require.Contains(t, md, "| 3 | Receive + ack | m | 1 | 2 | 2.00× | t | ✓ |")
	require.Contains(t, md, "| 11 | Cold start | p50 | warm: 5.00 ms | cold: 380 ms | cold/warm: 76.00× | ≤ 1.5× | ✗ |")
	require.Contains(t, md, "## 11. Cold start\n\n| metric | warm | cold | cold/warm | target | |\n")
	require.Contains(t, md, "## 3. Receive + ack\n\n| metric | raw SQL | Ferry | Ferry/raw | target | |\n", "other sections keep theirs")
	require.Equal(t, 1, strings.Count(md, "| warm |"), "only the cold-start section has them")
}

func TestReportRendersEverySectionPart(t *testing.T) {
	t.Parallel()
	rep := &Report{
		Header: []string{"Date: today", "Machine: 2 CPUs"},
		Took:   7*time.Minute + 8*time.Second + 400*time.Millisecond,
		Sections: []*Section{
			{Number: 1, Title: "Batch send", Rows: []Row{
				{Metric: "send throughput", Raw: "10 msgs/s", Ferry: "5 msgs/s", Ratio: "0.50×", Target: "≥ 0.5×", Pass: pass(true)},
				{Metric: "evidence only", Raw: "a", Ferry: "b"},
			}, How: "Clients send.", Notes: []string{"A note.", "Another note."}},
			{Number: 9, Title: "Fan-out", Grids: []Grid{{Caption: "Statements:", Header: []string{"tag", "calls"},
				Rows: [][]string{{"`ferry:event_append`", "10"}, {"`untagged`", "2"}}}}},
			{Number: 10, Title: "Consumer groups", Notes: []string{"**Failed:** boom"}},
		},
	}
	md := rep.Markdown()
	require.True(t, strings.HasPrefix(md, "# Ferry benchmarks\n\n"))
	require.Contains(t, md, "- Date: today\n- Machine: 2 CPUs\n- Whole run: 7m8s\n\n## Summary\n\n")
	require.Contains(t, md, "| 1 | Batch send | send throughput | 10 msgs/s | 5 msgs/s | 0.50× | ≥ 0.5× | ✓ |\n")
	require.NotContains(t, md, "| 1 | Batch send | evidence only", "rows without a target stay out of the summary")
	require.Contains(t, md, "| 10 | Consumer groups | see below | | | | | |\n", "a failed section points to its note")
	require.NotContains(t, md, "| 9 | Fan-out | see below", "a section with neither rows nor notes has no summary line")
	require.Contains(t, md, "## 1. Batch send\n\n| metric | raw SQL | Ferry | Ferry/raw | target | |\n|---|---|---|---|---|---|\n"+
		"| send throughput | 10 msgs/s | 5 msgs/s | 0.50× | ≥ 0.5× | ✓ |\n| evidence only | a | b |  |  |  |\n\n"+
		"**How measured.** Clients send.\n\nA note.\n\nAnother note.\n\n")
	require.Contains(t, md, "## 9. Fan-out\n\nStatements:\n\n| tag | calls |\n|---|---|\n| `ferry:event_append` | 10 |\n| `untagged` | 2 |\n\n")
	require.Contains(t, md, "## 10. Consumer groups\n\n**Failed:** boom\n\n")
	require.Less(t, strings.Index(md, "## 1. "), strings.Index(md, "## 9. "), "sections in their order")
}

func TestRowCheck(t *testing.T) {
	t.Parallel()
	require.Equal(t, "✓", Row{Pass: pass(true)}.check())
	require.Equal(t, "✗", Row{Pass: pass(false)}.check())
	require.Empty(t, Row{}.check(), "evidence rows have no verdict")
	target, ok := verdict("< 50 ms", true)
	require.Equal(t, "< 50 ms: target met", target)
	require.True(t, *ok)
	target, ok = verdict("< 50 ms", false)
	require.Equal(t, "< 50 ms: missed", target)
	require.False(t, *ok)
}

func TestLatencyRowsAreP50AndP99(t *testing.T) {
	t.Parallel()
	rows := latencyRows("request latency", Summarize(ms(1, 2, 3, 4)), Summarize(ms(2, 4, 6, 8)))
	require.Equal(t, []Row{
		{Metric: "request latency p50", Raw: "2.00 ms", Ferry: "4.00 ms", Ratio: "2.00×"},
		{Metric: "request latency p99", Raw: "4.00 ms", Ferry: "8.00 ms", Ratio: "2.00×"},
	}, rows)
}

// TestEverySectionRendersFromAnEmptyOutcome builds each scenario's section
// from zero outcomes (a run that measured nothing): no panic, no format
// error, a how-measured text for each.
func TestEverySectionRendersFromAnEmptyOutcome(t *testing.T) {
	t.Parallel()
	sz := coldSizes{messages: 1000, events: 1000, light: time.Second, budget: time.Second}
	ms := coldMeasures(sz)
	noteRounds := func(s string) string { return "rounds after " + s }
	stmts := map[string]*[2]stmtPhase{"single send": {{messages: 1, requests: 1}, {messages: 1, requests: 1}}}
	sections := map[string]*Section{
		"throughput": throughputSection("m", "l", Phase{}, Phase{}, nil, 0.5, batchSendHow(8, 500, time.Second, noteRounds)),
		"wake":       wakeSection(wakeResult{}, wakeResult{}, wakeResult{}, 1),
		"claim":      claimSection(claimSamples{}, claimSamples{}, 10_000, 1_000_000, 1),
		"churn":      churnSection(churnResult{}, churnResult{}, 100, time.Second),
		"statements": statementsSection([]string{"single send"}, stmts, map[string]string{"single send": "request"}, statementsHow(1, 1, 1, 1, 1, 1, 1, 1)),
		"publish":    publishSection(Phase{}, Phase{}, Phase{}, Phase{}, nil, nil, [2]densityCheck{}, 1, 1, 1, time.Second, noteRounds),
		"fanout":     fanoutSection([]fanoutResult{{subs: 1}}, [2]int64{}, pushOutcome{}, "no pg_stat_statements", time.Second, time.Second),
		"groups":     groupsSection(groupRead{}, groupRead{}, groupRead{}, groupRead{}, groupLatency{}, rebalance{}, nil, 0, time.Second, "no pg_stat_statements"),
		"coldstart":  coldSection(sz, ms, coldSide{runs: make([]coldRun, len(ms))}, coldSide{runs: make([]coldRun, len(ms))}),
		"leave":      leaveSection(nil, takeover{}),
		"sqlapi":     sqlAPISection([]sqlAPIResult{{part: "order + ferry.send"}}, sqlAPIWake{}, time.Second, 1, noteRounds),
		"sqs":        sqsFaceSection(Phase{}, Phase{}, nil, sqsWake{}, sqsFaceHow(8, time.Second, 200, noteRounds)),
	}
	rep := &Report{}
	for name, s := range sections {
		require.NotEmpty(t, s.How, name)
		require.NotEmpty(t, s.Rows, name)
		s.Title = name
		rep.Sections = append(rep.Sections, s)
	}
	md := rep.Markdown()
	require.NotContains(t, md, "%!", "every format verb has its argument")
	require.NotContains(t, md, "NaN")
}

func TestRebalanceShowsAsPollsFromTheLastBeforeTToTheTakeover(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	var all []memberPoll
	for i := range 14 { // one poll a second, each answered after 1 s
		all = append(all, memberPoll{sent: t0.Add(time.Duration(i) * time.Second), at: t0.Add(time.Duration(i+1) * time.Second),
			generation: int64(2 + i/10), partitions: []int{0, 1}})
	}
	all[10].partitions = []int{0, 1, 2, 3}
	out := rebalance{stoppedAt: t0.Add(1500 * time.Millisecond)} // T: between poll 0's and poll 1's answers
	out.analyse(all, all[10])
	require.Len(t, out.shown, 11, "poll 0 (the last answered before T) to poll 10 (the takeover)")
	require.Equal(t, all[0], out.shown[0])
	require.Equal(t, all[10], out.shown[10])
	require.Equal(t, 2, out.gensSeenAfter, "generations 2 and 3 after T")
	require.Equal(t, time.Second, out.interval)
	require.Equal(t, time.Second, out.pollMean)

	rows := rebalanceTimeline(out.shown, out.stoppedAt)
	require.Len(t, rows, 4+1+4, "4 polls at each end, the middle elided")
	require.Equal(t, []string{"-1.500 s", "-0.500 s", "2", "[0 1]"}, rows[0])
	require.Equal(t, []string{"… 3 more polls …", "+3.500 s … +5.500 s", "", ""}, rows[4])
	require.Equal(t, []string{"+8.500 s", "+9.500 s", "3", "[0 1 2 3]"}, rows[8])
	require.Len(t, rebalanceTimeline(out.shown[:9], out.stoppedAt), 9, "a short timeline is shown whole")
}
