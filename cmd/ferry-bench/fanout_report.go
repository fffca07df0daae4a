package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// fanoutSection is scenario 9's report: part 1's rows per subscription
// count, part 2's push latency and part 3's statements per delivery.
func fanoutSection(results []fanoutResult, checked [2]int64, p pushOutcome, statementsReason string, perSide, pushFor time.Duration) *Section {
	var rows []Row
	for _, r := range results {
		rows = append(rows, fanoutRows(r)...)
	}
	rows = append(rows, Row{Metric: "fan-out: offsets dense and deliveries = events × N after every window",
		Raw: fmt.Sprintf("all %d windows", checked[rawSide]), Ferry: fmt.Sprintf("all %d windows", checked[ferrySide])})
	rows = append(rows, pushRows(p)...)
	var grids []Grid
	var notes []string
	if p.stmtsOK {
		sr, g := stmtRows(p)
		rows = append(rows, sr...)
		grids = append(grids, g)
	} else {
		notes = append(notes, "**Statements per delivery skipped:** "+statementsReason+
			" (part 3 needs pg_stat_statements loaded through shared_preload_libraries).")
	}
	if p.failed > 0 || p.arrived < p.published {
		notes = append(notes, fmt.Sprintf("**Push:** %d publishes failed; %d of %d published events were not pushed within 10 s of the last publish.",
			p.failed, p.published-p.arrived, p.published))
	}
	notes = append(notes, pushNote(p))

	return &Section{
		Rows:  rows,
		Grids: grids,
		Notes: notes,
		How:   fanoutHow(perSide, pushFor),
	}
}

// fanoutRows are part 1's rows for one subscription count.
func fanoutRows(r fanoutResult) []Row {
	n := float64(r.subs)
	what := fmt.Sprintf("fan-out to %d: ", r.subs)
	rows := []Row{
		{Metric: what + "publish throughput (batches of 100)", Raw: fmtRateOf(r.raw.Rate(), events), Ferry: fmtRateOf(r.ferry.Rate(), events),
			Ratio: ratioOf(r.ferry.Rate(), r.raw.Rate()), Target: "—"},
		{Metric: what + "deliveries written (events/s × N)", Raw: fmtInt(int64(r.raw.Rate()*n+0.5)) + " deliveries/s",
			Ferry: fmtInt(int64(r.ferry.Rate()*n+0.5)) + " deliveries/s", Ratio: ratioOf(r.ferry.Rate(), r.raw.Rate())},
	}
	rows = append(rows, Row{Metric: what + "requests counted in the window", Raw: fmtInt(int64(len(r.raw.Latencies))), Ferry: fmtInt(int64(len(r.ferry.Latencies)))})
	rows = append(rows, latencyRows(what+"request latency", Summarize(r.raw.Latencies), Summarize(r.ferry.Latencies))...)
	rows = append(rows,
		Row{Metric: what + "WAL bytes per delivery", Raw: fmt.Sprintf("%.0f", r.raw.WALPerMessage()/n),
			Ferry: fmt.Sprintf("%.0f", r.ferry.WALPerMessage()/n), Ratio: ratioOf(r.ferry.WALPerMessage(), r.raw.WALPerMessage())},
		Row{Metric: what + "PostgreSQL CPU-ms per 1,000 deliveries", Raw: cpuPerDelivery(r.raw, n), Ferry: cpuPerDelivery(r.ferry, n),
			Ratio: ratioOf(r.ferry.CPU.PG/r.ferry.Rate(), r.raw.CPU.PG/r.raw.Rate())},
		Row{Metric: what + "CPU cores in use", Raw: fmtCPU(r.raw.CPU), Ferry: fmtCPU(r.ferry.CPU)},
	)
	return rows
}

func cpuPerDelivery(p Phase, n float64) string {
	if !p.CPU.PGKnown {
		return "n/a"
	}
	if p.Rate() == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", p.CPU.PG/(p.Rate()*n)*1e6)
}

// verdict renders a target and whether it was met.
func verdict(target string, ok bool) (string, *bool) {
	if ok {
		return target + ": target met", pass(true)
	}
	return target + ": missed", pass(false)
}

// pushRows are part 2's rows.
func pushRows(p pushOutcome) []Row {
	l := p.latency
	complete := p.arrived == p.published && p.failed == 0
	t50, ok50 := verdict("< 50 ms (issue)", complete && l.N > 0 && l.P50 < pushP50Target)
	t99, ok99 := verdict("< 250 ms (issue)", complete && l.N > 0 && l.P99 < pushP99Target)
	const what = "push: "
	return []Row{
		{Metric: what + "publish → delivered latency p50", Raw: "—", Ferry: fmtMs(l.P50), Target: t50, Pass: ok50},
		{Metric: what + "publish → delivered latency p90", Raw: "—", Ferry: fmtMs(l.P90)},
		{Metric: what + "publish → delivered latency p99", Raw: "—", Ferry: fmtMs(l.P99), Target: t99, Pass: ok99},
		{Metric: what + "publish → delivered latency max", Raw: "—", Ferry: fmtMs(l.Max)},
		{Metric: what + "events delivered / published", Raw: "—",
			Ferry:  fmt.Sprintf("%s / %s (%d missing, %d publishes failed)", fmtInt(int64(p.arrived)), fmtInt(int64(p.published)), p.published-p.arrived, p.failed),
			Target: "= published", Pass: pass(complete)},
		{Metric: what + "repeated deliveries (same event id again)", Raw: "—", Ferry: fmtInt(p.dups)},
		{Metric: what + "publish request latency p50 / p99", Raw: "—", Ferry: fmtMs(p.publish.P50) + " / " + fmtMs(p.publish.P99)},
		{Metric: what + "publish answered → delivered p50 / p99", Raw: "—", Ferry: fmtMs(p.after.P50) + " / " + fmtMs(p.after.P99)},
		{Metric: what + "push attempts recorded (ok), mean attempt duration", Raw: "—",
			Ferry: fmt.Sprintf("%s (%s), %.1f ms", fmtInt(p.attempts), fmtInt(p.okAtt), p.attemptMs)},
	}
}

// stmtRows are part 3's rows and its grid of top statements.
func stmtRows(p pushOutcome) ([]Row, Grid) {
	tags := publishTags()
	var (
		recorded   = p.stmts.calls()
		river      = p.stmts.where(stmtStat.isRiver).calls()
		publishTx  = p.stmts.tagged(publishClaimTag).calls()
		begins     = p.stmts.where(func(s stmtStat) bool { return strings.TrimSpace(s.query) == "BEGIN" }).calls()
		publishing = p.stmts.where(func(s stmtStat) bool { return slices.Contains(tags, s.tag) || s.isTxControl() }).calls()
	)
	// BEGIN and COMMIT of the publish transactions that were not recorded
	// (an upper-case BEGIN recorded is taken to be one of theirs).
	unseen := 2 * max(publishTx-begins, 0)
	all := recorded + unseen
	d := float64(max(p.arrived, 1))
	per := float64(all) / d
	rows := []Row{
		{Metric: "SQL statements per pushed delivery, all (publish + fan-out + push, River included)", Raw: "—", Ferry: fmt.Sprintf("%.2f", per)},
		{Metric: "of which: pipelined BEGIN/COMMIT of publish transactions, added (not recorded by pg_stat_statements)", Raw: "—", Ferry: fmt.Sprintf("%.2f", float64(unseen)/d)},
		{Metric: "of which: River's (jobs, maintenance)", Raw: "—", Ferry: fmt.Sprintf("%.2f", float64(river)/d)},
		{Metric: "of which: publishing (the publish transactions, BEGIN/COMMIT included)", Raw: "—", Ferry: fmt.Sprintf("%.2f", float64(publishing+unseen)/d)},
		func() Row {
			deliver := float64(all-publishing-unseen-river) / d
			t, ok := verdict("≤ 5 (issue: delivery state changes; Convoy ~32)", p.arrived > 0 && deliver <= stmtsPerDeliveryTarget)
			return Row{Metric: "of which: delivery (claims, acks, nacks, attempt records, wake-ups)", Raw: "—",
				Ferry: fmt.Sprintf("%.2f", deliver), Target: t, Pass: ok}
		}(),
		{Metric: "publish transactions per delivered event (group commit merges publishes)", Raw: "—", Ferry: fmt.Sprintf("%.2f", float64(publishTx)/d)},
		{Metric: "statements in the window (recorded + added), events delivered, window", Raw: "—",
			Ferry: fmt.Sprintf("%s + %s, %s, %s", fmtInt(recorded), fmtInt(unseen), fmtInt(int64(p.arrived)), p.elapsed.Round(10*time.Millisecond))},
	}
	g := stmtGrid(fmt.Sprintf("Push (part 3): the statements with the most calls during the measured window (%s events delivered)", fmtInt(int64(p.arrived))),
		p.stmts, int64(max(p.arrived, 1)), "per delivery", 15)
	return rows, g
}

// pushNote says where the push latency goes, from the measured split.
func pushNote(p pushOutcome) string {
	return fmt.Sprintf("Where push latency goes: of the p50 of %s from publish to delivery, the publish request itself (the group-committed "+
		"transaction writing the event and its delivery, and the answer) takes %s at p50; the rest, from the publish's answer to the POST arriving "+
		"(kick or notifier wake-up of the push worker, claim, HTTP request), %s at p50 (%s at p99; negative when the POST arrived before the "+
		"publisher had read its answer).",
		fmtMs(p.latency.P50), fmtMs(p.publish.P50), fmtMs(p.after.P50), fmtMs(p.after.P99))
}

// fanoutHow says how scenario 9 measures.
func fanoutHow(perSide, pushFor time.Duration) string {
	return fmt.Sprintf("**Fan-out (part 1):** per side a %d-partition topic created through the API with N = %v pull subscriptions (`PUT /v1/topics/{t}/subscriptions/{s}` `{}`: "+
		"no filter, unordered); %d concurrent clients publish batches of %d keyed events (the keys and body of scenario 8) for one window of %s per side and N "+
		"(raw first for N = 1 and 100, Ferry first for N = 10), each after a TRUNCATE of the message and event tables, next_offset reset to 0 and a CHECKPOINT, "+
		"with a %s warm-up not counted; a request counts when it completes inside the window, and requests still running 5 ms after it ends are cancelled "+
		"(a cut Ferry publish may still commit; the check below reads one snapshot). One window rather than alternating rounds: at N = 100 "+
		"a transaction takes around a second and every round would add a warm-up, the requests still in flight at its end and a reset. "+
		"With so few, large transactions the rates at N = 100 are coarse (see the requests counted) and move by tens of percent between runs. Ferry: `POST /v1/topics/{t}/events`; the publish transaction writes the events and one `ferry.messages` row per "+
		"(subscription, event), plus its dedup rows. Raw: one pgx batch (one round trip, one implicit transaction) of an `UPDATE ferry.topic_partitions SET "+
		"next_offset = next_offset + n` per partition touched (in partition order), then one statement that `INSERT`s the %d events into `ferry.events` "+
		"(offsets from the bumped counters, `RETURNING` them) and `INSERT ... SELECT`s %d×N rows into `ferry.messages` from that and `unnest` of the N "+
		"subscription ids (ids from `nextval`, the event as the body, built with `jsonb_build_object` in the shape Ferry stores it), into the pull "+
		"subscriptions of a topic of its own made through the API, so triggers and indexes are the same; no dedup. Deliveries/s = events/s × N. After every "+
		"window each partition's offsets are checked dense and the topic's deliveries (`ferry.queue_counts`) equal to events × N; both topics are deleted "+
		"through the API before the next N. "+
		"**Push latency (part 2):** one %d-partition topic, one push subscription (`\"push\": {\"url\": ..., \"timeout_seconds\": %d, \"max_in_flight\": %d}`, "+
		"no rate limit) to an in-process `net/http` receiver on 127.0.0.1 that answers 204 and records when each event id (`webhook-id`) first arrives. "+
		"Single-event publishes with client-given ids, started from a schedule at %d events/s for %s (open loop: each in its own goroutine, so a slow "+
		"publish does not delay the next), after a %s warm-up at the same rate whose events were all delivered first (not counted). Latency = arrival "+
		"at the receiver − the time just before the publish request was sent; every published event must arrive (the bench waits up to 10 s after the "+
		"last publish). The server runs with `AllowPrivatePush` (loopback URLs allowed), Ferry's default push settings otherwise "+
		"(one push worker slot per instance in this configuration: `PushWorkers` is left at 0, served as 1). "+
		"**Statements (part 3):** pg_stat_statements (track = top) reset after the warm-up and read as soon as the last event arrived; every statement "+
		"of the bench's database is counted, River's included (its job and maintenance statements), and divided by "+
		"the events delivered; publishing's statements are told apart from delivery's by their tag comments (`/* ferry:event_append */`, ...), not by their text, and "+
		"the bench runs no SQL in that window. BEGIN and COMMIT sent as plain statements are recorded; the publish "+
		"transaction's BEGIN and COMMIT travel in a pipeline (extended protocol), which pg_stat_statements on PostgreSQL 15 mostly does not record: "+
		"two statements are added per publish transaction (counted by its first statement, the `ferry.event_dedup` claim) beyond the upper-case BEGINs recorded.",
		topicPartitions, fanoutSubCounts(), fanoutClients, fanoutBatch, perSide, warmupFor(perSide),
		fanoutBatch, fanoutBatch, topicPartitions, pushTimeout, pushMaxInFlight, pushRate, pushFor, time.Second/2)
}
