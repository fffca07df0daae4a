package main

import (
	"fmt"
	"strings"
	"time"
)

// opsCell says how many operations a run measured, and whether its budget
// ran out.
func opsCell(r coldRun, ops int64) string {
	s := fmt.Sprintf("%s in %.1f s", fmtInt(r.run.Done), r.run.Elapsed.Seconds())
	if r.run.OutOfTime {
		s = fmt.Sprintf("%s of %s in %.1f s: **time budget ran out**, %d cut", fmtInt(r.run.Done), fmtInt(ops), r.run.Elapsed.Seconds(), r.run.Cut)
	}
	var odd []string
	if r.short > 0 {
		odd = append(odd, fmt.Sprintf("%d returned fewer than %d", r.short, coldTake))
	}
	if r.fenced > 0 {
		odd = append(odd, fmt.Sprintf("%d commits fenced", r.fenced))
	}
	if len(odd) > 0 {
		s += " (" + strings.Join(odd, ", ") + ")"
	}
	return s
}

// coldRows are one measurement's rows: p50 and p99, cold against warm,
// with the target, then the evidence. A cold run whose budget ran out
// shows lower bounds (≥) and misses the target, as does a warm one.
func coldRows(m coldMeasure, cold, warm coldRun) []Row {
	cs, ws := Summarize(cold.run.Latencies), Summarize(warm.run.Latencies)
	complete := cold.run.Done > 0 && warm.run.Done > 0 && !cold.run.OutOfTime && !warm.run.OutOfTime
	target := fmt.Sprintf("≤ %.1f×", coldTarget)
	row := func(pct string, c, w time.Duration) Row {
		r := Row{Metric: m.name + " latency " + pct, Raw: fmtMs(w), Ferry: fmtMs(c), Ratio: fmtRatio(float64(c), float64(w)), Target: target,
			Pass: pass(complete && w > 0 && float64(c) <= coldTarget*float64(w))}
		if cold.run.OutOfTime {
			r.Ferry = "≥ " + r.Ferry
			if w > 0 {
				r.Ratio = "≥ " + r.Ratio
			}
		}
		return r
	}
	return []Row{
		row("p50", cs.P50, ws.P50),
		row("p99", cs.P99, ws.P99),
		{Metric: m.name + " latency p90 / max", Raw: fmtMs(ws.P90) + " / " + fmtMs(ws.Max), Ferry: fmtMs(cs.P90) + " / " + fmtMs(cs.Max),
			Ratio: fmtRatio(float64(cs.P90), float64(ws.P90)) + " / " + fmtRatio(float64(cs.Max), float64(ws.Max))},
		{Metric: fmt.Sprintf("%s: operations measured (%d concurrent), wall time", m.name, m.workers), Raw: opsCell(warm, m.ops), Ferry: opsCell(cold, m.ops)},
		{Metric: fmt.Sprintf("%s: auto-analyses of ferry.%s after its backlog was complete, before / during the measurement", m.name, m.table),
			Raw: "— (VACUUM ANALYZE before the server started)", Ferry: fmt.Sprintf("%d / %d", cold.analysedBefore, cold.analysedDuring)},
	}
}

// coldSection is the scenario's report.
func coldSection(sz coldSizes, ms []coldMeasure, cold, warm coldSide) *Section {
	var rows []Row
	for i, m := range ms {
		rows = append(rows, coldRows(m, cold.runs[i], warm.runs[i])...)
	}
	var kinds []string
	for k, name := range cold.light.kinds {
		kinds = append(kinds, fmt.Sprintf("%s %s", name, fmtInt(cold.light.requests[k])))
	}
	rows = append(rows,
		Row{Metric: "light use before the backlog (cold side only)", Raw: "—",
			Ferry: fmt.Sprintf("%s requests from %d clients in %.0f s (%s); %d connections in the server's pool at the end",
				fmtInt(cold.light.total()), lightClients, cold.light.elapsed.Seconds(), strings.Join(kinds, " · "), cold.light.conns)},
		Row{Metric: fmt.Sprintf("backlog built through the API (%d clients, batches of %d): %s events (with their deliveries), then %s messages",
			coldBuilders, coldBatch, fmtInt(int64(sz.events)), fmtInt(int64(sz.messages))),
			Raw:   fmt.Sprintf("%.1f s, %.1f s", warm.backlog.events.Seconds(), warm.backlog.messages.Seconds()),
			Ferry: fmt.Sprintf("%.1f s, %.1f s", cold.backlog.events.Seconds(), cold.backlog.messages.Seconds()),
			Ratio: fmtRatio(float64(cold.backlog.events), float64(warm.backlog.events)) + ", " +
				fmtRatio(float64(cold.backlog.messages), float64(warm.backlog.messages))},
	)
	return &Section{
		Rows:    rows,
		Columns: &Columns{Raw: "warm", Ferry: "cold", Ratio: "cold/warm"},
		How:     coldHow(sz, ms),
		Notes:   coldNotes(ms, cold, warm),
	}
}

// coldHow says how scenario 11 measures.
func coldHow(sz coldSizes, ms []coldMeasure) string {
	var each []string
	for _, m := range ms {
		each = append(each, fmt.Sprintf("%s: %s operations from %d clients", m.name, fmtInt(m.ops), m.workers))
	}
	return fmt.Sprintf("Both sides are Ferry; what differs is what the database and the server's pool saw before. "+
		"**Cold:** a new database on the bench's cluster, migrated by a new in-process server (its own pool, DBMaxConns as above): a new install. "+
		"For %s, %d clients use a small queue and a small %d-partition topic (a pull subscription, a consumer group whose members are the clients) "+
		"through the API, each sending its next request on the next %s tick (bursts of %d requests at once, so the pool opens many connections), "+
		"in turn: send 1 message, receive up to %d + ack, publish 1 event, subscription receive up to %d + ack, group poll up to %d + commit, "+
		"event read of %d from offset 0. Every pooled connection thus runs every statement many times on tables with next to nothing in them "+
		"(pgx prepares and caches statements per connection, and PostgreSQL may keep a generic plan after five executions). Then a new queue and "+
		"a new %d-partition topic with a pull subscription are created, %s events are published, then %s messages sent (%d clients, batches of %d, "+
		"through the same server; the queue's backlog last, so that it meets its measurement first), a CHECKPOINT is taken, and the measurements "+
		"start at once: no ANALYZE (autovacuum runs as it would; the auto-analyses rows say whether it analysed the table after the backlog "+
		"the measurement consumes was complete, before or during the measurement: that would hide a plan that depends on stale statistics). **Warm:** another new database, the same queue, topic and backlog built the same way, then VACUUM ANALYZE, a CHECKPOINT and "+
		"a new server (a new pool), which measures. **Measurements**, in this order, on both sides: %s; each client loops over its operation, "+
		"after one unrecorded operation per client (a new connection's setup is not measured); every operation's latency is recorded. "+
		"Receives are `POST .../receive` `{\"max_messages\": 100}` then `POST .../ack` of the receipts; the group is joined first by one member per "+
		"partition (`start: earliest`, one poll of `max_events` 1 each, committed), then each member polls `{\"max_events\": 100}` (no wait) and "+
		"commits the highest offset per partition; event reads are `GET .../events?partition=p&from_offset=o&limit=100`, the partitions in turn "+
		"and o drawn uniformly from each partition's events with a fixed seed (the same reads on both sides). Each measurement has a time budget "+
		"of %s (-cold-budget), its warm-up included: when it runs out, the operations in flight are cancelled and recorded with the time they had "+
		"taken (lower bounds), the rest are not run, and the row says so and fails, so a cliff shows as a bad ratio rather than a hung bench. "+
		"Ratio = cold ÷ warm of the same percentile; target ≤ %.1f× (issue 8).",
		sz.light, lightClients, topicPartitions, lightTick, lightClients, lightTake, lightTake, lightTake, lightTake,
		topicPartitions, fmtInt(int64(sz.events)), fmtInt(int64(sz.messages)), coldBuilders, coldBatch,
		strings.Join(each, "; "), sz.budget, coldTarget)
}

// coldNotes flag measurements that ran out of time or whose table
// autovacuum analysed on the cold side.
func coldNotes(ms []coldMeasure, cold, warm coldSide) []string {
	var notes []string
	for i, m := range ms {
		c, w := cold.runs[i], warm.runs[i]
		for _, s := range []struct {
			side string
			r    coldRun
		}{{"cold", c}, {"warm", w}} {
			if s.r.run.OutOfTime {
				notes = append(notes, fmt.Sprintf("**%s, %s side: the time budget ran out** after %s of %s operations (%d cut in flight): "+
					"its percentiles are lower bounds, computed from what was measured.", m.name, s.side, fmtInt(s.r.run.Done), fmtInt(m.ops), s.r.run.Cut))
			}
		}
		if c.analysedBefore+c.analysedDuring > 0 {
			notes = append(notes, fmt.Sprintf("%s, cold side: autovacuum analysed ferry.%s after the backlog was complete (%d times before, %d during the measurement), "+
				"so the statistics knew of the backlog for part or all of it.", m.name, m.table, c.analysedBefore, c.analysedDuring))
		}
	}
	return notes
}
