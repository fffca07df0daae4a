package main

import "fmt"

// statementsSection is scenario 7's report: per phase, the statements per
// message and per request on both sides, and every statement of Ferry's
// by its tag.
func statementsSection(order []string, results map[string]*[2]stmtPhase, units map[string]string, how string) *Section {
	var rows []Row
	var grids []Grid
	for _, name := range order {
		r, f := results[name][rawSide], results[name][ferrySide]
		per := func(p stmtPhase, d int64) float64 { return float64(p.stmts.calls()) / float64(d) }
		untaggedPer := float64(f.stmts.tagged(untagged).calls()) / float64(f.messages)
		rows = append(rows,
			Row{Metric: name + ": statements per message", Raw: fmt.Sprintf("%.3f", per(r, r.messages)), Ferry: fmt.Sprintf("%.3f", per(f, f.messages)),
				Ratio: ratioOf(per(f, f.messages), per(r, r.messages))},
			Row{Metric: name + ": statements per " + units[name], Raw: fmt.Sprintf("%.2f", per(r, r.requests)), Ferry: fmt.Sprintf("%.2f", per(f, f.requests)),
				Ratio: ratioOf(per(f, f.requests), per(r, r.requests))},
			Row{Metric: name + ": PostgreSQL execution µs per message", Raw: fmt.Sprintf("%.1f", r.stmts.execMs()*1000/float64(r.messages)),
				Ferry: fmt.Sprintf("%.1f", f.stmts.execMs()*1000/float64(f.messages)), Ratio: ratioOf(f.stmts.execMs()/float64(f.messages), r.stmts.execMs()/float64(r.messages))},
			Row{Metric: name + ": of Ferry's, statements per message without a tag (`untagged` in the grid below: but for BEGIN and COMMIT, a statement missing its tag)", Raw: "—",
				Ferry: fmt.Sprintf("%.3f", untaggedPer)},
		)
		grids = append(grids, stmtGrid(
			fmt.Sprintf("%s, Ferry (%s messages in %s %ss): every statement, by its tag", name, fmtInt(f.messages), fmtInt(f.requests), units[name]),
			f.stmts, f.requests, "per "+units[name], 0))
	}
	return &Section{Rows: rows, Grids: grids, How: how}
}

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
