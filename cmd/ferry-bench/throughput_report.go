package main

import (
	"fmt"
	"strings"
	"time"
)

// throughputRows are the headline rows of a throughput comparison: the
// rates over all rounds, and the ratio of each pair of rounds.
func throughputRows(metric string, raw, ferry Phase, pairs []float64, target float64) []Row {
	ratio := ferry.Rate() / raw.Rate()
	each := make([]string, len(pairs))
	for i, p := range pairs {
		each[i] = fmt.Sprintf("%.2f", p)
	}
	return []Row{{
		Metric: metric,
		Raw:    fmtRate(raw.Rate()),
		Ferry:  fmtRate(ferry.Rate()),
		Ratio:  ratioOf(ferry.Rate(), raw.Rate()),
		Target: fmt.Sprintf("≥ %.1f×", target),
		Pass:   pass(raw.Rate() > 0 && ratio >= target), // no raw rate: nothing to compare with
	}, {
		Metric: "Ferry/raw in each round pair (noise)",
		Ratio:  strings.Join(each, " · "),
	}}
}

// roundsNote describes the alternation, for the "how measured" texts.
func (b *Bench) roundsNote(extra string) string {
	return fmt.Sprintf("Each side runs %d rounds of %s in the order raw, Ferry, Ferry, raw, ..., each round after %s and a %s warm-up that is not counted.",
		b.opts.Rounds, b.opts.Duration/time.Duration(b.opts.Rounds), extra, warmupFor(b.opts.Duration/time.Duration(b.opts.Rounds)))
}

func drainedNote(raw, ferry Phase) []string {
	if raw.Drained || ferry.Drained {
		return []string{"Note: a queue ran empty before the end of a window; that window was cut at the last completed operation (raise -prefill)."}
	}
	return nil
}

// throughputSection is the rows of scenarios 1-3: the rates against the
// target, the latencies of the operations, and the evidence.
func throughputSection(metric, latency string, raw, ferry Phase, pairs []float64, target float64, how string) *Section {
	rows := throughputRows(metric, raw, ferry, pairs, target)
	rows = append(rows, latencyRows(latency, Summarize(raw.Latencies), Summarize(ferry.Latencies))...)
	rows = append(rows, evidenceRows(raw, ferry)...)
	return &Section{Rows: rows, How: how, Notes: drainedNote(raw, ferry)}
}

// batchSendHow says how scenario 1 measures; roundsNote describes the
// rounds after a reset.
func batchSendHow(clients, batch int, d time.Duration, roundsNote func(string) string) string {
	return fmt.Sprintf("%d concurrent clients, each sending batches of %d messages (the same ~110-byte JSON body) for %s per side. "+
		"Raw: one `INSERT INTO ferry.messages ... SELECT ... FROM unnest($2::text[])` per batch, ids from `nextval`, autocommit (one transaction per batch), "+
		"on a pgxpool. Ferry: `POST /v1/queues/{q}/messages` with %d messages (request body encoded once), keep-alive HTTP; "+
		"Ferry's sender may merge concurrent requests into one transaction. "+roundsNote("TRUNCATE + CHECKPOINT"),
		clients, batch, d, batch)
}

// singleSendHow says how scenario 2 measures.
func singleSendHow(clients int, d time.Duration, roundsNote func(string) string) string {
	return fmt.Sprintf("%d concurrent clients, each sending one message at a time for %s per side. "+
		"Raw: one single-row `INSERT` per transaction (autocommit) on %d pooled connections, so PostgreSQL's own group commit "+
		"is all that merges their fsyncs. Ferry: %d concurrent HTTP clients each `POST`ing one message; Ferry's sender "+
		"coalesces the requests that arrive while a transaction commits into the next one (SendWorkers transactions in flight). "+
		"Latency is per request (one message). "+roundsNote("TRUNCATE + CHECKPOINT"),
		clients, d, clients, clients)
}

// receiveAckHow says how scenario 3 measures.
func receiveAckHow(clients, batch int, d time.Duration, prefill int, roundsNote func(string) string) string {
	return fmt.Sprintf("%d concurrent consumers for %s per side, each looping: claim up to %d, then acknowledge them. "+
		"Before each round the queue is prefilled with %s messages (`INSERT ... SELECT generate_series`, then VACUUM ANALYZE and CHECKPOINT). "+
		"Raw: Ferry's claim statement (`SELECT ... ORDER BY visible_at, id LIMIT 100 FOR UPDATE SKIP LOCKED` feeding an `UPDATE` of "+
		"visible_at, receive_count and claim_token, returning every column), then `DELETE ... WHERE id = ANY($2)`: two autocommit statements. "+
		"Ferry: `POST .../receive` `{\"max_messages\":100}` and `POST .../ack` with the 100 receipts. A cycle is the pair; throughput counts acked messages. "+
		roundsNote("TRUNCATE and the prefill"),
		clients, d, batch, fmtInt(int64(prefill)))
}
