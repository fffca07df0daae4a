package main

import (
	"fmt"
	"time"
)

// wakeSection is scenario 4's report: send → receive latency of a waiting
// consumer, raw LISTEN/NOTIFY against Ferry's long poll on one instance and
// across two.
func wakeSection(raw, same, cross wakeResult, iters int) *Section {
	const target = 50 * time.Millisecond
	row := func(metric string, r, f time.Duration, withTarget bool) Row {
		row := Row{Metric: metric, Raw: fmtMs(r), Ferry: fmtMs(f), Ratio: fmtRatio(float64(f), float64(r))}
		if withTarget {
			row.Target, row.Pass = "< 50 ms", pass(f < target)
		}
		return row
	}
	return &Section{
		Rows: []Row{
			row("send → receive p50, consumer on the same instance", raw.wake.P50, same.wake.P50, false),
			row("send → receive p99, consumer on the same instance", raw.wake.P99, same.wake.P99, true),
			row("send → receive p50, consumer on a second instance", raw.wake.P50, cross.wake.P50, false),
			row("send → receive p99, consumer on a second instance", raw.wake.P99, cross.wake.P99, true),
			row("send request alone p50 (same instance)", raw.send.P50, same.send.P50, false),
			row("send request alone p99 (same instance)", raw.send.P99, same.send.P99, false),
		},
		How: fmt.Sprintf("%d messages per variant, one at a time. The consumer long-polls an empty queue; after a random pause of 5-25 ms "+
			"the producer sends one message; latency runs from the start of the producer's send request to the moment the consumer's "+
			"receive returns it (one process, monotonic clock); the consumer then acks and waits again. "+
			"Ferry: `receive` with `wait_seconds: 20`, `max_messages: 1`; same instance means producer and consumer talk to one server "+
			"(the sender wakes local waiters right after its commit); second instance means the consumer talks to another Ferry on the same "+
			"database, woken through Ferry's rate-limited NOTIFY (NotifyWindow 10 ms). "+
			"Raw: the consumer `LISTEN`s on its own connection and claims (Ferry's claim statement) whenever a notification arrives; "+
			"the producer `INSERT`s and `pg_notify`s in one autocommit statement. The raw column is the same measurement in every row.",
			iters),
	}
}

// claimSection is scenario 5's report: claim and receive+ack latency at a
// small and a large depth, and how much they grow.
func claimSection(small, large claimSamples, smallDepth, largeDepth, iters int) *Section {
	sn, ln := depthName(smallDepth), depthName(largeDepth)
	var (
		rsC, rsY, fsC, fsY = Summarize(small.rawClaim), Summarize(small.rawCycle), Summarize(small.ferryClaim), Summarize(small.ferryCycle)
		rlC, rlY, flC, flY = Summarize(large.rawClaim), Summarize(large.rawCycle), Summarize(large.ferryClaim), Summarize(large.ferryCycle)
	)
	var rows []Row
	add := func(metric string, r, f time.Duration) {
		rows = append(rows, Row{Metric: metric, Raw: fmtMs(r), Ferry: fmtMs(f), Ratio: fmtRatio(float64(f), float64(r))})
	}
	add("receive+ack p50 @ "+sn, rsY.P50, fsY.P50)
	add("receive+ack p99 @ "+sn, rsY.P99, fsY.P99)
	add("receive+ack p50 @ "+ln, rlY.P50, flY.P50)
	add("receive+ack p99 @ "+ln, rlY.P99, flY.P99)
	add("claim alone p50 @ "+sn, rsC.P50, fsC.P50)
	add("claim alone p99 @ "+sn, rsC.P99, fsC.P99)
	add("claim alone p50 @ "+ln, rlC.P50, flC.P50)
	add("claim alone p99 @ "+ln, rlC.P99, flC.P99)
	growth := func(metric string, rs, rl, fs, fl time.Duration) {
		g := float64(fl) / float64(fs)
		rows = append(rows, Row{
			Metric: metric + ", " + ln + " ÷ " + sn,
			Raw:    fmtRatio(float64(rl), float64(rs)),
			Ferry:  fmtRatio(float64(fl), float64(fs)),
			Target: "≤ 1.5× (Ferry)",
			Pass:   pass(g <= 1.5),
		})
	}
	growth("receive+ack p50", rsY.P50, rlY.P50, fsY.P50, flY.P50)
	growth("receive+ack p90", rsY.P90, rlY.P90, fsY.P90, flY.P90)
	growth("receive+ack p99", rsY.P99, rlY.P99, fsY.P99, flY.P99)
	rows = append(rows, Row{
		Metric: "shared buffers touched by one claim (EXPLAIN ANALYZE), " + sn + " → " + ln,
		Raw:    fmt.Sprintf("%d → %d", small.rawBuffers, large.rawBuffers),
		Ferry:  "same statement",
	})
	return &Section{
		Rows: rows,
		How: fmt.Sprintf("One client, one queue. The queue is filled to %s, then (after TRUNCATE) to %s waiting messages with `INSERT ... SELECT generate_series`, "+
			"VACUUM ANALYZE and CHECKPOINT. At each depth, %d iterations (after 20 unrecorded) alternate a raw round trip and a Ferry round trip on the same queue, "+
			"swapping which goes first every iteration, so both see the same table. Raw: the claim statement with `LIMIT 1`, then `DELETE` by id. "+
			"Ferry: `POST .../receive` `{\"max_messages\":1}` then `POST .../ack`. \"Claim alone\" is the raw claim statement or Ferry's receive request; "+
			"\"receive+ack\" is the pair. Ratio rows divide the %s figure by the %s one (within a column).",
			fmtInt(int64(smallDepth)), fmtInt(int64(largeDepth)), iters, ln, sn),
	}
}

// depthName renders 10000 as "10k" and 1000000 as "1M".
func depthName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmtInt(int64(n))
}
