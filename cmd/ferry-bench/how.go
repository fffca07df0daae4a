package main

import (
	"fmt"
	"time"
)

// The "how measured" texts of the scenarios: prose, kept apart from the
// code that measures.

// statementsHow says how scenario 7 measures.
func statementsHow(n, batches, received int64, singleClients, batch, batchClients, claim, consumers int) string {
	return fmt.Sprintf("pg_stat_statements (track = top, so statements run by triggers and functions are inside their caller) is reset before "+
		"each phase and read after it; River's statements and the bench's own are left out, BEGIN and COMMIT are counted "+
		"(River's own background transactions may add a handful). Statements are told apart by the tag comment each of Ferry's carries "+
		"(`/* ferry:message_claim */`); one without a tag shows as `untagged`. Phases, each on a freshly truncated table: %s single sends by %d clients; "+
		"%s batches of %d by %d clients; %s messages received in batches of %d and acked by %d consumers (prefilled; a cycle is one "+
		"claim and one delete for raw SQL, one receive and one ack request for Ferry). The raw side's statements are exactly the ones shown "+
		"in scenarios 1-3. "+
		"Execution time is PostgreSQL's `total_exec_time`, excluding network and commit waits.",
		fmtInt(n), singleClients, fmtInt(batches), batch, batchClients, fmtInt(received), claim, consumers)
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
