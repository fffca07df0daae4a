package main

import "fmt"

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
