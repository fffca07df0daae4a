package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHeldRowsJudgeTheGoalsOfIssue21(t *testing.T) {
	t.Parallel()
	side := func(p99 time.Duration, done, total int64) heldSide {
		return heldSide{last: Summary{N: 100, P50: p99 / 4, P99: p99}, lastDone: done, lastSpan: time.Minute,
			after: RelSizes{Total: total}, drained: true, windows: []heldWindow{{end: time.Minute, done: done, backlog: 20_000}}}
	}
	goals := func(none, held heldSide) map[string]bool {
		out := map[string]bool{}
		for _, r := range heldRows(heldResult{flow: heldFlows()[0], none: none, held: held}) {
			if r.Pass != nil {
				out[r.Metric] = *r.Pass
			}
		}
		return out
	}
	const (
		p99    = "queue: receive p99 in the last 1m0s"
		keepUp = "queue: msgs acked in the last 1m0s"
		size   = "queue: ferry.messages total size at the end"
	)
	none := side(20*time.Millisecond, 60_000, 10<<20)
	require.Equal(t, map[string]bool{p99: true, keepUp: true, size: true}, goals(none, side(40*time.Millisecond, 57_000, 20<<20)),
		"2×, 95% and 2× are within the goals")
	require.Equal(t, map[string]bool{p99: false, keepUp: false, size: false}, goals(none, side(41*time.Millisecond, 56_999, 20<<20+1)),
		"the issue's baseline: slower, behind and bigger")
	require.False(t, goals(heldSide{}, side(time.Millisecond, 1, 1))[p99], "nothing measured without the snapshot meets no goal")

	held := side(time.Second, 1, 1)
	held.drained, held.drain = false, 3*time.Minute
	for _, r := range heldRows(heldResult{flow: heldFlows()[0], none: none, held: held}) {
		if strings.HasPrefix(r.Metric, "queue: drain") {
			require.Equal(t, "not within 3m0s", r.Ferry, "a drain cut at its limit says so")
			return
		}
	}
	t.Fatal("no drain row")
}
