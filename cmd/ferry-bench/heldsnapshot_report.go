package main

import (
	"fmt"
	"time"
)

// heldResult is one flow of scenario 15, run without and with the held
// snapshot.
type heldResult struct {
	flow       heldFlow
	none, held heldSide
}

// heldColumns are scenario 15's value columns.
var heldColumns = Columns{Raw: "no held snapshot", Ferry: "snapshot held", Ratio: "held/none"} //nolint:gochecknoglobals // read-only column names

// heldSection is scenario 15's report: per flow, the goals of issue 21
// judged on the last minute and the end of the run, the evidence, the
// time series and the index sizes.
func heldSection(results []heldResult, d time.Duration, rate, backlog int) *Section {
	sec := &Section{Columns: &heldColumns}
	for _, r := range results {
		sec.Rows = append(sec.Rows, heldRows(r)...)
		sec.Grids = append(sec.Grids, heldSeries(r), heldIndexes(r))
	}
	sec.How = fmt.Sprintf("Each flow runs twice for %s on emptied tables, first with nothing else on the database, then while another session "+
		"holds a snapshot the whole time (`BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1`, kept open; its `backend_xmin` is checked), "+
		"so no dead row of any table can be pruned. Producers offer %s messages (events) a second, open loop (one send or publish of %d every %s, a slow one does "+
		"not delay the next). The queue and the subscription start from a backlog of %s (the queue's inserted in bulk, the subscription's "+
		"published through the API), then VACUUM ANALYZE; %d consumers receive up to %d (no wait) and ack what came, paced by a shared schedule "+
		"at the offered rate and running back to back when behind it, so without the snapshot the backlog stays flat. The group (one member, "+
		"start earliest) polls up to %d events (no wait) and commits each poll, paced the same way. Receive (poll) latency is the request's round "+
		"trip. The backlog is the starting one plus what was sent minus what was acked (committed), as the client counted. At the end the "+
		"snapshot ends and the consumers run unpaced, producers still at the same rate, until the backlog is back to where it started "+
		"(at most %s). Sizes are the flow's table: ferry.messages (a subscription's deliveries are messages) or ferry.events, with its indexes "+
		"and TOAST; n_dead_tup lags by a second or so. CPU is server-side where the bench started the server (see the summary's note).",
		d, fmtInt(int64(rate)), heldBatch, time.Second*heldBatch/time.Duration(rate), fmtInt(int64(backlog)), heldConsumers, heldBatch,
		heldGroupBatch, min(heldDrainCap, d))
	sec.Notes = []string{"**Goals (issue 21):** with the snapshot held, receive p99 in the last minute at most 2× the run without it; " +
		"consumers keep up (acked in the last minute at least 95% of the run without it); the table at the end at most 2× its size in the " +
		"run without it. The event log and a group's reads are append-only and should not degrade at all. This scenario is opt-in " +
		"(`-only held-snapshot`, `-held-duration 30m` for the long run) and is the baseline a storage design for held snapshots must beat."}
	return sec
}

// heldRows are a flow's goal and evidence rows.
func heldRows(r heldResult) []Row {
	n, h := r.none, r.held
	what, done := "receive", heldConsumed(r.flow)
	if r.flow.unit == events {
		what = "poll"
	}
	p := func(metric string) string { return r.flow.name + ": " + metric }
	last := fmt.Sprintf("in the last %s", n.lastSpan.Round(time.Second))
	keepUp := float64(h.lastDone) >= 0.95*float64(n.lastDone)
	return []Row{
		{Metric: p(what + " p99 " + last), Raw: fmtMs(n.last.P99), Ferry: fmtMs(h.last.P99), Ratio: fmtRatio(float64(h.last.P99), float64(n.last.P99)),
			Target: "≤ 2×", Pass: pass(n.last.N > 0 && h.last.N > 0 && h.last.P99 <= 2*n.last.P99)},
		{Metric: p(what + " p50 " + last), Raw: fmtMs(n.last.P50), Ferry: fmtMs(h.last.P50), Ratio: fmtRatio(float64(h.last.P50), float64(n.last.P50))},
		{Metric: p(r.flow.unit.many + " " + done + " " + last), Raw: fmtInt(n.lastDone), Ferry: fmtInt(h.lastDone),
			Ratio: fmtRatio(float64(h.lastDone), float64(n.lastDone)), Target: "≥ 0.95× (keeps up)", Pass: pass(n.lastDone > 0 && keepUp)},
		{Metric: p(r.flow.table + " total size at the end"), Raw: fmtBytes(n.after.Total), Ferry: fmtBytes(h.after.Total),
			Ratio: fmtRatio(float64(h.after.Total), float64(n.after.Total)), Target: "≤ 2×", Pass: pass(h.after.Total <= 2*n.after.Total)},
		{Metric: p(r.flow.table + " heap / indexes: start → end"), Raw: heldGrowth(n), Ferry: heldGrowth(h)},
		{Metric: p("n_dead_tup at the end of the run"), Raw: fmtInt(heldLastDead(n)), Ferry: fmtInt(heldLastDead(h))},
		{Metric: p("backlog: start → end of the run"), Raw: fmtInt(n.startBacklog) + " → " + heldEndBacklog(n), Ferry: fmtInt(h.startBacklog) + " → " + heldEndBacklog(h)},
		{Metric: p("drain back to the starting backlog after the run (the snapshot ended)"), Raw: heldDrain(n), Ferry: heldDrain(h)},
		{Metric: p("CPU cores in use during the run"), Raw: fmtCPU(n.cpu), Ferry: fmtCPU(h.cpu)},
		{Metric: p("ferry.queue_counts total size: start → end"), Raw: fmtBytes(n.counts[0]) + " → " + fmtBytes(n.counts[1]),
			Ferry: fmtBytes(h.counts[0]) + " → " + fmtBytes(h.counts[1])},
		{Metric: p("age of the held snapshot's xmin when it ended (transactions)"), Raw: "—", Ferry: fmtInt(h.xminAge)},
	}
}

func heldGrowth(s heldSide) string {
	return fmtBytes(s.before.Heap) + " / " + fmtBytes(s.before.IndexBytes()) + " → " + fmtBytes(s.after.Heap) + " / " + fmtBytes(s.after.IndexBytes())
}

func heldLastDead(s heldSide) int64 {
	if len(s.windows) == 0 {
		return 0
	}
	return s.windows[len(s.windows)-1].sizes.Dead
}

func heldEndBacklog(s heldSide) string {
	if len(s.windows) == 0 {
		return "—"
	}
	return fmtInt(s.windows[len(s.windows)-1].backlog)
}

func heldDrain(s heldSide) string {
	if !s.drained {
		return "not within " + s.drain.Round(time.Second).String()
	}
	return s.drain.Round(100 * time.Millisecond).String()
}

// heldSeries is a flow's windows, both runs side by side.
func heldSeries(r heldResult) Grid {
	g := Grid{
		Caption: fmt.Sprintf("%s, per window (no held snapshot | snapshot held):", r.flow.name),
		Header: []string{"t", "p50 / p99", "held p50 / p99", heldConsumed(r.flow), "held " + heldConsumed(r.flow), "backlog", "held backlog",
			"PG CPU", "held PG CPU", "heap / indexes", "held heap / indexes", "n_dead_tup", "held n_dead_tup"},
	}
	cells := func(s heldSide, i int) [6]string {
		if i >= len(s.windows) {
			return [6]string{}
		}
		w := s.windows[i]
		cpu := "n/a"
		if w.cpu.PGKnown {
			cpu = fmt.Sprintf("%.2f", w.cpu.PG)
		}
		return [6]string{fmtMs(w.lat.P50) + " / " + fmtMs(w.lat.P99), fmtInt(w.done), fmtInt(w.backlog), cpu,
			fmtBytes(w.sizes.Heap) + " / " + fmtBytes(w.sizes.IndexBytes()), fmtInt(w.sizes.Dead)}
	}
	for i := range max(len(r.none.windows), len(r.held.windows)) {
		n, h := cells(r.none, i), cells(r.held, i)
		t := ""
		for _, s := range []heldSide{r.none, r.held} {
			if i < len(s.windows) {
				t = s.windows[i].end.String()
			}
		}
		row := []string{t}
		for c := range n {
			row = append(row, n[c], h[c])
		}
		g.Rows = append(g.Rows, row)
	}
	return g
}

// heldIndexes is a flow's index sizes at the start and the end of both
// runs.
func heldIndexes(r heldResult) Grid {
	g := Grid{Caption: fmt.Sprintf("%s, indexes of %s (start → end):", r.flow.name, r.flow.table),
		Header: []string{"index", "no held snapshot", "snapshot held"}}
	get := func(s RelSizes, name string) int64 {
		for _, ix := range s.Indexes {
			if ix.Name == name {
				return ix.Bytes
			}
		}
		return 0
	}
	for _, ix := range r.held.after.Indexes {
		g.Rows = append(g.Rows, []string{ix.Name,
			fmtBytes(get(r.none.before, ix.Name)) + " → " + fmtBytes(get(r.none.after, ix.Name)),
			fmtBytes(get(r.held.before, ix.Name)) + " → " + fmtBytes(ix.Bytes)})
	}
	return g
}
