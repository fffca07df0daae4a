package main

import (
	"fmt"
	"time"
)

// churnSection is scenario 6's report: sizes before, right after and after
// VACUUM on both sides, the growth per message against the target, and the
// sizes during the run.
func churnSection(raw, ferry churnResult, depth int, d time.Duration) *Section {
	rate := func(r churnResult) string {
		return fmt.Sprintf("%s in / %s out", fmtRate(float64(r.in)/r.elapsed.Seconds()), fmtRate(float64(r.out)/r.elapsed.Seconds()))
	}
	trio := func(a, b, c int64) string { return fmtBytes(a) + " → " + fmtBytes(b) + " → " + fmtBytes(c) }
	perK := func(r churnResult) float64 {
		if r.out == 0 {
			return 0
		}
		return float64(r.after.Total-r.before.Total) / float64(r.out) * 1000
	}
	// Ferry passes when it grows at most 1.5 times as much per message as
	// raw SQL does under the same pattern (or does not grow at all).
	ok := perK(ferry) <= 0 || perK(raw) > 0 && perK(ferry)/perK(raw) <= 1.5
	growthRow := Row{
		Metric: "growth per 1,000 messages consumed (total)",
		Raw:    fmtBytes(int64(perK(raw))),
		Ferry:  fmtBytes(int64(perK(ferry))),
		Ratio:  ratioOf(perK(ferry), perK(raw)),
		Target: "≤ 1.5×",
		Pass:   pass(ok),
	}
	percent := func(p float64) string {
		if p < 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.0f%%", p)
	}
	autovacuums := func(r churnResult) string {
		return fmt.Sprintf("%d (+%d)", r.autovacuumRuns, r.autovacuumLate)
	}
	dead := func(n int64) string {
		if n < 0 {
			return "n/a"
		}
		return fmtInt(n)
	}
	rows := []Row{
		{Metric: "rates (steady depth)", Raw: rate(raw), Ferry: rate(ferry), Ratio: ratioOf(float64(ferry.out)/ferry.elapsed.Seconds(), float64(raw.out)/raw.elapsed.Seconds())},
		{Metric: "messages consumed", Raw: fmtInt(raw.out), Ferry: fmtInt(ferry.out)},
		{Metric: "queue depth before → at end", Raw: fmtInt(int64(depth)) + " → " + fmtInt(raw.depthAtEnd), Ferry: fmtInt(int64(depth)) + " → " + fmtInt(ferry.depthAtEnd)},
		{Metric: "total size: before → right after → after VACUUM", Raw: trio(raw.before.Total, raw.after.Total, raw.vacuumed.Total), Ferry: trio(ferry.before.Total, ferry.after.Total, ferry.vacuumed.Total)},
		{Metric: "heap: before → right after → after VACUUM", Raw: trio(raw.before.Heap, raw.after.Heap, raw.vacuumed.Heap), Ferry: trio(ferry.before.Heap, ferry.after.Heap, ferry.vacuumed.Heap)},
		{Metric: "indexes: before → right after → after VACUUM", Raw: trio(raw.before.IndexBytes(), raw.after.IndexBytes(), raw.vacuumed.IndexBytes()), Ferry: trio(ferry.before.IndexBytes(), ferry.after.IndexBytes(), ferry.vacuumed.IndexBytes())},
		growthRow,
		{Metric: "dead tuples right after (pgstattuple, exact)", Raw: dead(raw.deadExact), Ferry: dead(ferry.deadExact)},
		{Metric: "heap free for reuse after VACUUM (pgstattuple)", Raw: percent(raw.freeVacuumed), Ferry: percent(ferry.freeVacuumed)},
		{Metric: fmt.Sprintf("n_dead_tup (pg_stat_user_tables, %s after)", statsSettle), Raw: fmtInt(raw.deadStats), Ferry: fmtInt(ferry.deadStats)},
		{Metric: "autovacuum runs: during the run (+ after it, before n_dead_tup was read)", Raw: autovacuums(raw), Ferry: autovacuums(ferry)},
	}

	idx := Grid{Caption: "Per index (before → right after → after VACUUM):", Header: []string{"index", "raw SQL", "Ferry"}}
	for i, ix := range raw.before.Indexes {
		get := func(r RelSizes) int64 {
			if i < len(r.Indexes) {
				return r.Indexes[i].Bytes
			}
			return 0
		}
		idx.Rows = append(idx.Rows, []string{ix.Name, trio(ix.Bytes, get(raw.after), get(raw.vacuumed)),
			trio(get(ferry.before), get(ferry.after), get(ferry.vacuumed))})
	}
	series := Grid{Caption: fmt.Sprintf("Sizes during the run, every %s (heap + indexes, and messages in/out so far):", sampleEvery),
		Header: []string{"t", "raw heap", "raw indexes", "raw in/out", "Ferry heap", "Ferry indexes", "Ferry in/out"}}
	for i := range max(len(raw.series), len(ferry.series)) {
		cell := func(s []churnSample) []string {
			if i >= len(s) {
				return []string{"", "", ""}
			}
			return []string{fmtBytes(s[i].heap), fmtBytes(s[i].index), fmtInt(s[i].in) + " / " + fmtInt(s[i].out)}
		}
		row := []string{fmt.Sprintf("%ds", (i+1)*int(sampleEvery/time.Second))}
		row = append(append(row, cell(raw.series)...), cell(ferry.series)...)
		series.Rows = append(series.Rows, row)
	}
	return &Section{
		Rows:  rows,
		Grids: []Grid{idx, series},
		Notes: []string{"Caveat: autovacuum_naptime is 1 minute, longer than a default run, so whether autovacuum gets to the table " +
			"inside a run is largely luck, and the dead-tuple counts mostly say whether it did. Each consumed message leaves about two dead " +
			"tuples (the claim's UPDATE of the indexed visible_at cannot be HOT; the DELETE kills the new version). A run this short shows " +
			"the growth rate, not the bound: run with `-only churn -churn 5m` to see whether sizes level off."},
		How: fmt.Sprintf("Each side on its own queue, prefilled to %s messages (then VACUUM ANALYZE, CHECKPOINT), runs for %s with %d producers "+
			"(batches of %d: raw one `INSERT ... unnest` per batch, Ferry one `POST .../messages`) and %d consumers (claim %d + delete: raw the claim "+
			"statement and `DELETE`, Ferry `receive` + `ack`). Consumers only take what producers added and producers only add what consumers took "+
			"(within %d messages), so the depth stays at the prefill and in and out rates are equal; whichever role is slower sets them. Sizes are `pg_relation_size` / `pg_total_relation_size` of ferry.messages and its "+
			"indexes: before, right after the run, and after a manual `VACUUM` (which marks space reusable but rarely shrinks files). Autovacuum runs "+
			"with PostgreSQL's defaults. Growth is compared per message consumed because the two sides move different numbers of messages.",
			fmtInt(int64(depth)), d, churnProducers, churnBatch, churnConsumers, churnBatch, churnSlack),
	}
}
