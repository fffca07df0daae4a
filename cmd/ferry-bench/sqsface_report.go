package main

import (
	"fmt"
	"strings"
	"time"
)

// sqsFaceTarget is the goal: the SQS face moves at least this
// fraction of what the REST face moves.
const sqsFaceTarget = 0.8

// sqsWakeTarget is the goal for a long poll's wake (must-have 4):
// p99 of send start → ReceiveMessage answered.
const sqsWakeTarget = 50 * time.Millisecond

// sqsFaceSection is scenario 14's report: REST in the left column, SQS in
// the right, the SQS/REST ratio of the throughput against the target, the
// round pairs, the cycle latencies, the SQS long-poll wakes (p50 and p99
// per condition and sender kind, in the SQS column) and the evidence.
func sqsFaceSection(rest, sqs Phase, pairs []float64, wake sqsWake, how string) *Section {
	each := make([]string, len(pairs))
	for i, p := range pairs {
		each[i] = fmt.Sprintf("%.2f", p)
	}
	rows := []Row{{
		Metric: "send 10 + receive 10 + delete batch: messages/s",
		Raw:    fmtRate(rest.Rate()),
		Ferry:  fmtRate(sqs.Rate()),
		Ratio:  ratioOf(sqs.Rate(), rest.Rate()),
		Target: fmt.Sprintf("≥ %.1f× (issue)", sqsFaceTarget),
		Pass:   pass(rest.Rate() > 0 && sqs.Rate()/rest.Rate() >= sqsFaceTarget),
	}, {
		Metric: "SQS/REST in each round pair (noise)",
		Ratio:  strings.Join(each, " · "),
	}}
	rows = append(rows, latencyRows("cycle latency (3 requests)", Summarize(rest.Latencies), Summarize(sqs.Latencies))...)
	rows = append(rows, sqsWakeRows(wake)...)
	rows = append(rows, evidenceRows(rest, sqs)...)
	return &Section{Rows: rows, How: how, Columns: &Columns{Raw: "REST", Ferry: "SQS", Ratio: "SQS/REST"}}
}

// sqsFaceHow says how scenario 14 measures.
func sqsFaceHow(clients int, d time.Duration, wakes int, roundsNote func(string) string) string {
	return fmt.Sprintf("The two faces of one Ferry server on one database, each on a queue of its own: %d concurrent clients per side for %s, "+
		"each looping over a cycle of three requests: send a batch of 10 messages (the same ~110-byte body), receive up to 10 (no wait), "+
		"delete what came. SQS: aws-sdk-go-v2's client (AWS JSON 1.0 protocol; each request signed with SigV4 by the SDK and verified by Ferry, "+
		"the SDK checking MD5OfMessageBody of what it sends and receives), `SendMessageBatch`, `ReceiveMessage` (`MaxNumberOfMessages` 10), "+
		"`DeleteMessageBatch`, as the admin access key. REST: the bench's client (encoding/json), `POST .../messages` with 10 messages, "+
		"`POST .../receive` `{\"max_messages\":10}`, `POST .../ack` with the receipts, Bearer key. Both use the same HTTP transport settings "+
		"(keep-alive, %d idle connections per host). Throughput counts messages deleted (acked); latency is that of the whole cycle. "+
		"REST takes raw SQL's place in the alternation: ", clients, d, 2*maxClients) + roundsNote("TRUNCATE + CHECKPOINT") +
		fmt.Sprintf(" **Long-poll wakes** (after the throughput rounds): one consumer long-polls an empty queue through the SQS face "+
			"(aws-sdk-go-v2 `ReceiveMessage`, `MaxNumberOfMessages` 1, `WaitTimeSeconds` 20) and deletes what came (`DeleteMessage`); "+
			"once it is about to wait, a producer pauses 5–25 ms at random and sends one message, then waits for the receive: %d wakes per "+
			"sender kind and condition, each kind's in two halves in the order SQS, REST, SQL, SQL, REST, SQS. Senders: `SendMessage` (the "+
			"same SDK client), REST `POST .../messages` of one message, and `SELECT * FROM ferry.send(queue, body)` in a transaction of its own "+
			"(BEGIN, the send, COMMIT in one round trip). The latency is send start → ReceiveMessage answered. Conditions: idle, and "+
			"under %s messages/s sent to another queue (REST, batches of %d on a fixed schedule); in both a REST consumer long-polls that "+
			"queue (`wait_seconds` 20, up to 100) and acks what comes, so one REST long poll is parked (idle) or cycling (loaded) alongside.",
			wakes, fmtInt(sqsWakeLoadRate), sqsWakeLoadBatch)
}

// sqsWakeRows are the wake part's rows: per condition and sender kind,
// ReceiveMessage's wake p50 · p99, judged by p99 against sqsWakeTarget
// (a case without samples fails).
func sqsWakeRows(w sqsWake) []Row {
	var rows []Row
	for cond, loaded := range []bool{false, true} {
		what := "idle"
		if loaded {
			what = fmt.Sprintf("background %s", fmtRate(w.loaded))
		}
		for s := range w.wake[cond] {
			sum := w.wake[cond][s]
			rows = append(rows, Row{
				Metric: fmt.Sprintf("long-poll wake, %s → ReceiveMessage, %s: p50 · p99", sqsSender(s), what),
				Ferry:  fmtMs(sum.P50) + " · " + fmtMs(sum.P99),
				Target: fmt.Sprintf("p99 < %s (issue)", fmtMs(sqsWakeTarget)),
				Pass:   pass(sum.N > 0 && sum.P99 < sqsWakeTarget),
			})
		}
	}
	return rows
}
