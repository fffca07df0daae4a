package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// sqlAPISection is scenario 13's report: per part, the transaction rates
// of both sides and their ratio, the round pairs, the latencies, and for
// publishes the relay's catch-up after the window; then the latency
// parts, against REST publishes. The issue sets no target for the
// transactions (their ratios are reported, not judged); a SQL publish's
// push delivery has REST's targets.
func sqlAPISection(results []sqlAPIResult, w sqlAPIWake, d time.Duration, prefill int, roundsNote func(string) string) *Section {
	s := &Section{Columns: &Columns{Raw: "raw SQL, or REST (latency rows)", Ferry: "SQL API", Ratio: "SQL API ÷ left"}}
	txs := unit{"transaction", "tx"}
	for _, r := range results {
		each := make([]string, len(r.pairs))
		for i, p := range r.pairs {
			each[i] = fmt.Sprintf("%.2f", p)
		}
		unit, raw, ferry := "transactions", fmtRateOf(r.raw.Rate(), txs), fmtRateOf(r.ferry.Rate(), txs)
		if strings.HasPrefix(r.part, "ferry.receive") {
			unit, raw, ferry = "messages", fmtRate(r.raw.Rate()), fmtRate(r.ferry.Rate())
		}
		s.Rows = append(s.Rows,
			Row{Metric: r.part + ": " + unit + "/s", Raw: raw, Ferry: ferry, Ratio: ratioOf(r.ferry.Rate(), r.raw.Rate())},
			Row{Metric: r.part + ": Ferry/raw in each round pair (noise)", Ratio: strings.Join(each, " · ")})
		s.Rows = append(s.Rows, latencyRows(r.part+": transaction latency", Summarize(r.raw.Latencies), Summarize(r.ferry.Latencies))...)
		if r.drain > 0 {
			s.Rows = append(s.Rows, Row{Metric: r.part + ": relay caught up after the window within", Ferry: r.drain.Round(time.Millisecond).String()})
		}
	}
	s.Rows = append(s.Rows, sqlPushRows(w.push)...)
	s.Rows = append(s.Rows, sqlPollRows(w.poll)...)
	s.How = fmt.Sprintf("%d concurrent clients per side for %s, each running one application transaction at a time, "+
		"sent as one round trip (BEGIN, INSERT INTO bench_app.orders, the producer statement, COMMIT). "+
		"Raw: the producer statement is `INSERT INTO bench_app.outbox (topic, payload)` — an outbox without its relay. "+
		"Ferry: `SELECT * FROM ferry.send(queue, body)`, or `ferry.publish(topic, type, data, {\"key\": ...})` to a topic with "+
		"1 or 10 pull subscriptions; after each Ferry window the bench waits until the built-in relay has appended every event "+
		"published in it (shown as the catch-up time). Receive + ack: one transaction that claims up to 100 "+
		"(raw: Ferry's claim statement; Ferry: `ferry.receive(queue, 100)`) and settles them (raw: `DELETE ... WHERE id = ANY`; "+
		"Ferry: `ferry.ack(queue, receipts)`) in two round trips, from a queue prefilled with %s messages. ",
		sqlAPIClients, d, fmtInt(int64(prefill))) + roundsNote("TRUNCATE (and the prefill)") + " " + sqlAPIWakeHow(w)
	if n := sqlPushNote(w.push); n != "" {
		s.Notes = append(s.Notes, n)
	}
	s.Notes = append(s.Notes, sqlPushSplit(w.push, sqlPublishCapacity(results)))
	return s
}

// sqlPushRows are the push part's rows: REST in the left column, SQL in
// the right, and REST's targets (scenario 9's) on the SQL side.
func sqlPushRows(p [2]publishLatency) []Row {
	rest, sql := p[viaREST], p[viaSQL]
	const what = "SQL commit → push delivered: "
	complete := func(l publishLatency) bool { return l.published > 0 && l.arrived == l.published && l.failed == 0 }
	t50, ok50 := verdict("< 50 ms (issue)", complete(sql) && sql.latency.P50 < pushP50Target)
	t99, ok99 := verdict("< 250 ms (REST's, issue)", complete(sql) && sql.latency.P99 < pushP99Target)
	row := func(metric string, r, f time.Duration) Row {
		return Row{Metric: what + metric, Raw: fmtMs(r), Ferry: fmtMs(f), Ratio: latencyRatio(f, r)}
	}
	p50, p99 := row("transaction sent → delivered p50", rest.latency.P50, sql.latency.P50), row("transaction sent → delivered p99", rest.latency.P99, sql.latency.P99)
	p50.Target, p50.Pass, p99.Target, p99.Pass = t50, ok50, t99, ok99
	delivered := func(l publishLatency) string {
		return fmt.Sprintf("%s / %s (%d missing, %d failed)", fmtInt(int64(l.arrived)), fmtInt(int64(l.published)), l.published-l.arrived, l.failed)
	}
	return []Row{
		p50,
		row("transaction sent → delivered p90", rest.latency.P90, sql.latency.P90),
		p99,
		row("transaction sent → delivered max", rest.latency.Max, sql.latency.Max),
		row("COMMIT answered → delivered p50", rest.after.P50, sql.after.P50),
		row("COMMIT answered → delivered p99", rest.after.P99, sql.after.P99),
		row("the transaction (REST: the publish request) p50", rest.publish.P50, sql.publish.P50),
		row("the transaction (REST: the publish request) p99", rest.publish.P99, sql.publish.P99),
		{Metric: what + "events delivered / published", Raw: delivered(rest), Ferry: delivered(sql),
			Target: "= published", Pass: pass(complete(rest) && complete(sql))},
		{Metric: what + "repeated deliveries (same event id again)", Raw: fmtInt(rest.dups), Ferry: fmtInt(sql.dups)},
	}
}

// sqlPollRows are the long-poll part's rows, REST on the left.
func sqlPollRows(p [2]wakeResult) []Row {
	rest, sql := p[viaREST], p[viaSQL]
	const what = "SQL commit → long poll answered: "
	row := func(metric string, r, f time.Duration) Row {
		return Row{Metric: what + metric, Raw: fmtMs(r), Ferry: fmtMs(f), Ratio: latencyRatio(f, r)}
	}
	return []Row{
		row("COMMIT answered → long poll answered p50", rest.after.P50, sql.after.P50),
		row("COMMIT answered → long poll answered p99", rest.after.P99, sql.after.P99),
		row("transaction sent → long poll answered p50", rest.wake.P50, sql.wake.P50),
		row("transaction sent → long poll answered p99", rest.wake.P99, sql.wake.P99),
		row("the transaction (REST: the publish request) p50", rest.send.P50, sql.send.P50),
	}
}

// latencyRatio is f/r, or "—" where a ratio of the two says nothing: an
// empty side, or a negative latency (an answer that came before the
// publisher had read its own).
func latencyRatio(f, r time.Duration) string {
	if f < 0 || r <= 0 {
		return "—"
	}
	return fmtRatio(float64(f), float64(r))
}

// sqlPushNote reports publishes that failed or were not pushed.
func sqlPushNote(p [2]publishLatency) string {
	var out []string
	for _, v := range []via{viaREST, viaSQL} {
		if l := p[v]; l.failed > 0 || l.arrived < l.published {
			out = append(out, fmt.Sprintf("%s: %d publishes failed; %d of %d published events were not pushed within 10 s of a run's last publish",
				strings.ToUpper(v.String()), l.failed, l.published-l.arrived, l.published))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "**Push:** " + strings.Join(out, ". ") + "."
}

// sqlPublishCapacity is the rate of the closed-loop order +
// ferry.publish part to one subscription (0 if it did not run).
func sqlPublishCapacity(results []sqlAPIResult) float64 {
	for _, r := range results {
		if strings.HasPrefix(r.part, "order + ferry.publish, 1 ") {
			return r.ferry.Rate()
		}
	}
	return 0
}

// sqlPushSplit says where a SQL publish's push latency goes, against
// REST's, from the measured split, and how the push part's offered rate
// compares with capacity, the closed-loop rate of SQL publishes measured
// before it.
func sqlPushSplit(p [2]publishLatency, capacity float64) string {
	rest, sql := p[viaREST], p[viaSQL]
	load := ""
	if capacity > 0 && !math.IsInf(capacity, 0) {
		load = fmt.Sprintf(" The push part offers %d events/s: %.0f%% of the %s the %d closed-loop clients above reached with order + ferry.publish "+
			"to one subscription; near or above 100%% its SQL transactions queue behind each other, and the figures above measure that queue.",
			pushRate, 100*pushRate/capacity, fmtRateOf(capacity, unit{"transaction", "tx"}), sqlAPIClients)
	}
	return fmt.Sprintf("Where a SQL publish's push latency goes: of the p50 of %s from sending the transaction to delivery (REST: %s), the "+
		"transaction itself takes %s at p50 (REST's publish request, group-committed with others: %s); the rest, from COMMIT's answer to the POST "+
		"arriving (the commit's NOTIFY, the relay's append, the push worker's wake-up, claim and request), %s at p50 and %s at p99 "+
		"(REST, from its 201: %s and %s). A SQL API commit NOTIFYs, and notifying commits wait for each other's fsync (docs/outbox.md): "+
		"at a fixed rate the transactions queue behind each other once the rate nears 1/fsync, where REST's publishes share theirs.",
		fmtMs(sql.latency.P50), fmtMs(rest.latency.P50), fmtMs(sql.publish.P50), fmtMs(rest.publish.P50),
		fmtMs(sql.after.P50), fmtMs(sql.after.P99), fmtMs(rest.after.P50), fmtMs(rest.after.P99)) + load
}

// sqlAPIWakeHow says how the latency parts measure.
func sqlAPIWakeHow(w sqlAPIWake) string {
	return fmt.Sprintf("**Latency rows**, SQL API against REST publishes (left column), each side in four runs in the order REST, SQL, SQL, REST. "+
		"SQL: an application transaction of one round trip, BEGIN, the order INSERT, `SELECT * FROM ferry.publish(topic, type, data, "+
		"jsonb_build_object('id', id, 'key', key))`, COMMIT; the event is appended (offset, fan-out) after the commit by the built-in outbox relay, "+
		"woken by the commit's NOTIFY. REST: `POST /v1/topics/{t}/events` of the same single event (id, key, body), appended in the request. "+
		"*Push:* per run a fresh %d-partition topic with one push subscription (`timeout_seconds` %d, `max_in_flight` %d) to an in-process receiver, "+
		"as scenario 9's: publishes started from a schedule at %d events/s for %s (open loop), after a %s warm-up at the same rate whose events were "+
		"all delivered first (not counted); every published event must arrive within 10 s of the run's last publish. "+
		"*Long poll:* %d rounds per side of scenario 4's loop: a consumer long-polls a pull subscription "+
		"(`receive`, `max_messages` 1, `wait_seconds` 20) and acks what it gets; after a random pause of 5-25 ms the producer publishes one event. "+
		"\"Transaction sent\" is the time just before the transaction (REST: the request) is sent, \"COMMIT answered\" when its answer (REST: the 201) "+
		"was read; a REST long poll can be answered before the publisher reads its 201 (the publish wakes local waiters right after its commit), "+
		"hence REST figures near zero or below it, and no ratio then. With scenario 4's second instance up (a full run), the relay and the push "+
		"worker may run on either instance.",
		topicPartitions, pushTimeout, pushMaxInFlight, pushRate, w.pushFor, time.Second/2, w.polls)
}
