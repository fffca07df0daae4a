package main

import (
	"fmt"
	"strings"
	"time"
)

// sqsFaceTarget is the goal: the SQS face moves at least this
// fraction of what the REST face moves.
const sqsFaceTarget = 0.8

// sqsFaceSection is scenario 14's report: REST in the left column, SQS in
// the right, the SQS/REST ratio of the throughput against the target, the
// round pairs, the cycle latencies and the evidence.
func sqsFaceSection(rest, sqs Phase, pairs []float64, how string) *Section {
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
	rows = append(rows, evidenceRows(rest, sqs)...)
	return &Section{Rows: rows, How: how, Columns: &Columns{Raw: "REST", Ferry: "SQS", Ratio: "SQS/REST"}}
}

// sqsFaceHow says how scenario 14 measures.
func sqsFaceHow(clients int, d time.Duration, roundsNote func(string) string) string {
	return fmt.Sprintf("The two faces of one Ferry server on one database, each on a queue of its own: %d concurrent clients per side for %s, "+
		"each looping over a cycle of three requests: send a batch of 10 messages (the same ~110-byte body), receive up to 10 (no wait), "+
		"delete what came. SQS: aws-sdk-go-v2's client (AWS JSON 1.0 protocol; each request signed with SigV4 by the SDK and verified by Ferry, "+
		"the SDK checking MD5OfMessageBody of what it sends and receives), `SendMessageBatch`, `ReceiveMessage` (`MaxNumberOfMessages` 10), "+
		"`DeleteMessageBatch`, as the admin access key. REST: the bench's client (encoding/json), `POST .../messages` with 10 messages, "+
		"`POST .../receive` `{\"max_messages\":10}`, `POST .../ack` with the receipts, Bearer key. Both use the same HTTP transport settings "+
		"(keep-alive, %d idle connections per host). Throughput counts messages deleted (acked); latency is that of the whole cycle. "+
		"REST takes raw SQL's place in the alternation: ", clients, d, 2*maxClients) + roundsNote("TRUNCATE + CHECKPOINT")
}
