package main

import (
	"fmt"
	"strings"
	"time"
)

// sqlAPISection is scenario 13's report: per part, the transaction rates
// of both sides and their ratio, the round pairs, the latencies, and for
// publishes the relay's catch-up after the window. The issue sets no
// target: the ratios are reported, not judged.
func sqlAPISection(results []sqlAPIResult, d time.Duration, prefill int, roundsNote func(string) string) *Section {
	s := &Section{Columns: &Columns{Raw: "raw SQL (outbox INSERT; claim + DELETE)", Ferry: "Ferry SQL API", Ratio: "Ferry/raw"}}
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
	s.How = fmt.Sprintf("%d concurrent clients per side for %s, each running one application transaction at a time, "+
		"sent as one round trip (BEGIN, INSERT INTO bench_app.orders, the producer statement, COMMIT). "+
		"Raw: the producer statement is `INSERT INTO bench_app.outbox (topic, payload)` — an outbox without its relay. "+
		"Ferry: `SELECT * FROM ferry.send(queue, body)`, or `ferry.publish(topic, type, data, {\"key\": ...})` to a topic with "+
		"1 or 10 pull subscriptions; after each Ferry window the bench waits until the built-in relay has appended every event "+
		"published in it (shown as the catch-up time). Receive + ack: one transaction that claims up to 100 "+
		"(raw: Ferry's claim statement; Ferry: `ferry.receive(queue, 100)`) and settles them (raw: `DELETE ... WHERE id = ANY`; "+
		"Ferry: `ferry.ack(queue, receipts)`) in two round trips, from a queue prefilled with %s messages. ",
		sqlAPIClients, d, fmtInt(int64(prefill))) + roundsNote("TRUNCATE (and the prefill)")
	return s
}
