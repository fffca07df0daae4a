package main

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// groupsSection is scenario 10's report.
func groupsSection(raw1, ferry1, raw4, ferry4 groupRead, lat groupLatency, reb rebalance, sizes []int64, n int, publishFor time.Duration, statementsReason string) *Section {
	rows := groupReadRows(raw1, ferry1)
	rows = append(rows, groupReadRows(raw4, ferry4)...)
	rows = append(rows, groupLatencyRows(lat)...)
	rows = append(rows, rebalanceRows(reb)...)

	var grids []Grid
	var notes []string
	if ferry1.stmtsOK {
		grids = append(grids, stmtGrid(
			fmt.Sprintf("Part 1, Ferry, 1 member: the statements of the measured run (%s polls of up to %d events, each followed by a commit but the last)",
				fmtInt(ferry1.requests), groupBatch), ferry1.stmts, ferry1.requests, "per poll", 20))
	}
	if lat.stmtsOK {
		group, _ := splitPublishing(lat.stmts)
		grids = append(grids, stmtGrid(
			fmt.Sprintf("Part 2: the member's statements in the measured window, publishing's left out (%s polls, %s of them with events, %s events)",
				fmtInt(lat.polls), fmtInt(lat.pollsWithEvents), fmtInt(int64(lat.arrived))), group, max(lat.polls, 1), "per poll", 20))
	}
	grids = append(grids, Grid{
		Caption: fmt.Sprintf("Part 3: member A's polls from the last one answered before T (B's last poll answered) to the first listing every partition; times relative to T, B's last_seen at %+.3f s",
			reb.lastSeenB.Seconds()),
		Header: []string{"poll sent", "answered", "generation", "partitions"},
		Rows:   rebalanceTimeline(reb.shown, reb.stoppedAt),
	})
	if !ferry1.stmtsOK {
		notes = append(notes, "**Statements skipped:** "+statementsReason+".")
	}
	notes = append(notes, groupNotes(raw1, ferry1, ferry4, lat, reb)...)

	return &Section{
		Rows:  rows,
		Grids: grids,
		Notes: notes,
		How:   groupsHow(sizes, n, publishFor),
	}
}

// groupReadRows are part 1's rows for one reader count.
func groupReadRows(raw, ferry groupRead) []Row {
	what := fmt.Sprintf("read, %d readers / members: ", raw.readers)
	if raw.readers == 1 {
		what = "read, 1 reader / member: "
	}
	rp, fp := raw.phase(), ferry.phase()
	perReq := func(r groupRead, n int64) string {
		if r.requests == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f", float64(n)/float64(r.requests))
	}
	pct := func(d []time.Duration) string {
		s := Summarize(d)
		return fmtMs(s.P50) + " / " + fmtMs(s.P99)
	}
	rows := []Row{
		{Metric: what + "throughput (events read and committed)", Raw: fmtRateOf(raw.rate(), events), Ferry: fmtRateOf(ferry.rate(), events),
			Ratio: ratioOf(ferry.rate(), raw.rate()), Target: "—"},
		{Metric: what + "events, wall time", Raw: fmt.Sprintf("%s in %s", fmtInt(raw.events), raw.elapsed.Round(time.Millisecond)),
			Ferry: fmt.Sprintf("%s in %s", fmtInt(ferry.events), ferry.elapsed.Round(time.Millisecond))},
		{Metric: what + "range reads (raw) / polls (Ferry), events each", Raw: fmt.Sprintf("%s, %s", fmtInt(raw.requests), perReq(raw, raw.events)),
			Ferry: fmt.Sprintf("%s, %s", fmtInt(ferry.requests), perReq(ferry, ferry.events))},
		{Metric: what + "read latency p50 / p99 (raw SELECT; Ferry poll request, answer decoded)", Raw: pct(raw.read), Ferry: pct(ferry.read)},
		{Metric: what + "commit latency p50 / p99 (raw UPDATE; Ferry commit request)", Raw: pct(raw.commit), Ferry: pct(ferry.commit)},
		{Metric: what + "CPU cores in use", Raw: fmtCPU(raw.win.CPU), Ferry: fmtCPU(ferry.win.CPU)},
		{Metric: what + "PostgreSQL CPU-ms per 1,000 events", Raw: cpuPer(raw.win.CPU.PG, rp, raw.win.CPU.PGKnown), Ferry: cpuPer(ferry.win.CPU.PG, fp, ferry.win.CPU.PGKnown),
			Ratio: ratioOf(ferry.win.CPU.PG/ferry.rate(), raw.win.CPU.PG/raw.rate())},
		{Metric: what + "bench-process CPU-ms per 1,000 events", Raw: cpuPer(raw.win.CPU.Self, rp, true), Ferry: cpuPer(ferry.win.CPU.Self, fp, true),
			Ratio: ratioOf(ferry.win.CPU.Self/ferry.rate(), raw.win.CPU.Self/raw.rate())},
	}
	rows = append(rows, cpuSplitRows(what, rp, fp)...)
	rows = append(rows, []Row{
		{Metric: what + "WAL bytes per event", Raw: fmt.Sprintf("%.1f", rp.WALPerMessage()), Ferry: fmt.Sprintf("%.1f", fp.WALPerMessage()),
			Ratio: ratioOf(fp.WALPerMessage(), rp.WALPerMessage())},
		{Metric: what + "write transactions per range read / poll", Raw: perReq(raw, raw.win.WriteXacts), Ferry: perReq(ferry, ferry.win.WriteXacts),
			Ratio: ratioOf(float64(ferry.win.WriteXacts)/float64(max(ferry.requests, 1)), float64(raw.win.WriteXacts)/float64(max(raw.requests, 1)))},
		{Metric: what + "PostgreSQL client backends: average active, and what they wait on", Raw: raw.win.Waits.String(), Ferry: ferry.win.Waits.String()},
	}...)
	if raw.stmtsOK && ferry.stmtsOK {
		rows = append(rows,
			Row{Metric: what + "SQL statements per range read / poll (with its commit)", Raw: perReq(raw, raw.stmts.calls()), Ferry: perReq(ferry, ferry.stmts.calls()),
				Ratio: ratioOf(float64(ferry.stmts.calls())/float64(max(ferry.requests, 1)), float64(raw.stmts.calls())/float64(max(raw.requests, 1)))},
			Row{Metric: what + "rows the read statement returns per range read / poll", Raw: fmt.Sprintf("%.0f", rowsPer(raw.stmts.tagged(rawGroupReadTag), raw.requests)),
				Ferry: fmt.Sprintf("%.0f (the member returns %.0f)", rowsPer(ferry.stmts.tagged(groupFetchTag), ferry.requests), float64(ferry.events)/float64(max(ferry.requests, 1)))},
			Row{Metric: what + "PostgreSQL execution ms per 1,000 events", Raw: fmt.Sprintf("%.1f", raw.stmts.execMs()*1000/float64(max(raw.events, 1))),
				Ferry: fmt.Sprintf("%.1f", ferry.stmts.execMs()*1000/float64(max(ferry.events, 1))),
				Ratio: ratioOf(ferry.stmts.execMs()/float64(max(ferry.events, 1)), raw.stmts.execMs()/float64(max(raw.events, 1)))},
		)
	}
	rows = append(rows, Row{Metric: what + "group drained (Ferry: lag 0 on every partition, every event committed once)", Raw: "—",
		Ferry: fmt.Sprintf("%s (%s)", map[bool]string{true: "yes", false: "**no**"}[ferry.drained], ferry.drainDetail)})
	return rows
}

// groupLatencyRows are part 2's rows.
func groupLatencyRows(l groupLatency) []Row {
	const what = "publish → poll: "
	rows := []Row{
		{Metric: what + "latency p50", Raw: "—", Ferry: fmtMs(l.latency.P50), Target: "—"},
		{Metric: what + "latency p90", Raw: "—", Ferry: fmtMs(l.latency.P90)},
		{Metric: what + "latency p99", Raw: "—", Ferry: fmtMs(l.latency.P99), Target: "—"},
		{Metric: what + "latency max", Raw: "—", Ferry: fmtMs(l.latency.Max)},
		{Metric: what + "events polled / published", Raw: "—",
			Ferry:  fmt.Sprintf("%s / %s (%d missing, %d publishes failed, %d polled twice)", fmtInt(int64(l.arrived)), fmtInt(int64(l.published)), l.published-l.arrived, l.failed, l.dups),
			Target: "= published", Pass: pass(l.arrived == l.published && l.failed == 0 && l.published > 0)},
		{Metric: what + "publish request latency p50 / p99", Raw: "—", Ferry: fmtMs(l.publish.P50) + " / " + fmtMs(l.publish.P99)},
		{Metric: what + "publish answered → poll answered p50 / p99", Raw: "—", Ferry: fmtMs(l.after.P50) + " / " + fmtMs(l.after.P99)},
		{Metric: what + "polls in the window (with events), commits, events per poll with events", Raw: "—",
			Ferry: fmt.Sprintf("%s (%s), %s, %.2f", fmtInt(l.polls), fmtInt(l.pollsWithEvents), fmtInt(l.commits),
				float64(l.arrived)/float64(max(l.pollsWithEvents, 1)))},
	}
	t, ok := verdict(fmt.Sprintf("0 (wait_seconds %d)", groupWait), l.emptyPolls == 0)
	rows = append(rows, Row{Metric: what + "polls answered without events in the window, their mean duration", Raw: "—",
		Ferry: fmt.Sprintf("%s, %s", fmtInt(l.emptyPolls), fmtMs(l.emptyMean)), Target: t, Pass: ok})
	if l.stmtsOK {
		group, publishing := splitPublishing(l.stmts)
		rows = append(rows,
			Row{Metric: what + "SQL statements of the member per poll (poll + its commit, when any)", Raw: "—",
				Ferry: fmt.Sprintf("%.1f (%.1f per event)", float64(group.calls())/float64(max(l.polls, 1)), float64(group.calls())/float64(max(l.arrived, 1)))},
			Row{Metric: what + "SQL statements of publishing per event (publish transactions, wake-up NOTIFYs; pipelined BEGIN/COMMIT not recorded)", Raw: "—",
				Ferry: fmt.Sprintf("%.1f", float64(publishing.calls())/float64(max(l.arrived, 1)))},
		)
	}
	return rows
}

// rebalanceRows are part 3's rows.
func rebalanceRows(r rebalance) []Row {
	const what = "rebalance: "
	return []Row{
		{Metric: what + "member B stops → member A's poll answer lists all partitions", Raw: "—", Ferry: fmt.Sprintf("%.2f s", r.took.Seconds()), Target: "—"},
		{Metric: what + "of which: until the poll that evicted B was sent (B's last_seen at T" + fmt.Sprintf("%+.3f s)", r.lastSeenB.Seconds()), Raw: "—",
			Ferry: fmt.Sprintf("%.2f s", r.evictingPollSentAt.Seconds())},
		func() Row {
			ok := r.pollMean >= 9*time.Second*rebalanceWait/10
			t, p := verdict(fmt.Sprintf("≈ %d s (wait_seconds)", rebalanceWait), ok)
			return Row{Metric: what + "member A's polls, nothing published: mean duration, mean interval", Raw: "—",
				Ferry: fmtMs(r.pollMean) + ", " + fmtMs(r.interval), Target: t, Pass: p}
		}(),
		{Metric: what + "generation changes after B stopped (generation at T → after)", Raw: "—",
			Ferry: fmt.Sprintf("%d (%d → %d; %d distinct generation(s) in A's answers after T)", r.genAfter-r.genAtT, r.genAtT, r.genAfter, r.gensSeenAfter)},
		{Metric: what + "group afterwards (describe)", Raw: "—", Ferry: r.members},
	}
}

// splitPublishing splits statements into the group member's and
// publishing's: the publish transactions (their tags, and their BEGIN and
// COMMIT) and the notifier's wake-up NOTIFYs.
func splitPublishing(stmts stmtList) (group, publishing stmtList) {
	tags := publishTags()
	for _, s := range stmts {
		if slices.Contains(tags, s.tag) || s.isTxControl() || s.isNotify() {
			publishing = append(publishing, s)
		} else {
			group = append(group, s)
		}
	}
	return group, publishing
}

// groupFetchTag is Ferry's fetch of a member's events, rawGroupReadTag the
// raw side's range read.
const groupFetchTag, rawGroupReadTag = "ferry:consumer_group_fetch", "raw:group_read"

// rowsPer is the rows the statements returned, per request.
func rowsPer(stmts stmtList, requests int64) float64 {
	return float64(stmts.rows()) / float64(max(requests, 1))
}

// groupNotes say where a poll's time goes, from the measured split.
func groupNotes(raw1, ferry1, ferry4 groupRead, l groupLatency, r rebalance) []string {
	var notes []string
	if ferry1.requests > 0 && len(ferry1.read) > 0 {
		mean := func(d []time.Duration) time.Duration {
			var s time.Duration
			for _, v := range d {
				s += v
			}
			return s / time.Duration(max(len(d), 1))
		}
		note := fmt.Sprintf("Where a poll cycle's time goes (part 1, 1 member): a poll request takes %s on average, of which the client's JSON decoding %s; "+
			"the commit request after it %s. ",
			fmtMs(mean(ferry1.read)), fmtMs(ferry1.decode/time.Duration(ferry1.requests)), fmtMs(mean(ferry1.commit)))
		if ferry1.stmtsOK {
			fetch := ferry1.stmts.tagged(groupFetchTag)
			fetchMs, fetchRows, fetchCalls := fetch.execMs(), float64(fetch.rows()), float64(fetch.calls())
			note += fmt.Sprintf("PostgreSQL executes %.1f ms of SQL per cycle (pg_stat_statements, commit waits excluded), %.1f ms of it the fetch, which returns "+
				"%.0f rows per call for the %.0f events a poll returns: it reads up to max_events from *each* owned partition (`LIMIT` inside the lateral join) and the "+
				"server keeps max_events of them, round-robin, so a member owning 4 partitions reads up to 4× what it returns. "+
				"The raw reader executes %.1f ms per batch of %d. The rest of a Ferry poll is the server's Go work (scanning and encoding %d events as JSON) and the "+
				"commits of its two write transactions.",
				ferry1.stmts.execMs()/float64(ferry1.requests), fetchMs/float64(ferry1.requests),
				fetchRows/max(fetchCalls, 1), float64(ferry1.events)/float64(max(ferry1.commits, 1)),
				raw1.stmts.execMs()/float64(max(raw1.requests, 1)), groupBatch, groupBatch)
		}
		notes = append(notes, note)
	}
	if ferry4.win.Waits.Samples > 0 {
		notes = append(notes, "With 4 members every poll still takes the group row's lock (`SELECT ... FROM ferry.consumer_groups ... FOR UPDATE`) "+
			"for its membership transaction, so the members' polls serialise on it for the length of that transaction, its commit included "+
			"(see the waits row: Lock:transactionid / Lock:tuple are waits on it).")
	}
	if r.pollMean < time.Second*rebalanceWait/2 || l.emptyPolls > 0 {
		notes = append(notes, fmt.Sprintf("**Long polling did not wait.** Member A's polls (wait_seconds %d, nothing published) were answered in %s on average, "+
			"and part 2's member got %s empty answers in its window (wait_seconds %d, an event every %s), so both members polled in a tight loop: part 3 measures "+
			"the session timeout alone (A polls continuously, so the first poll after B's session expired evicts it at once), and part 2 a busy-polling member. "+
			"Where to look first: `consumerGroupFetch` (store/consumer_group_poll.go) stops the wait when `memberFetch.advance` lists fewer partitions than the "+
			"member owns; if that list comes back short on an empty fetch (an empty partition list sent as NULL would do it: `partition <> ALL(NULL)` is NULL), "+
			"`longPoll` stops waiting at once and the partitions are wrongly reported as lost. With long polling waiting, part 3 should show ≈ %d-%d s and part 2 "+
			"only polls that carry events.",
			rebalanceWait, fmtMs(r.pollMean), fmtInt(l.emptyPolls), groupWait, time.Second/groupRate,
			rebalanceSession+rebalanceWait, rebalanceSession+2*rebalanceWait))
	}
	if l.pollsWithEvents > 0 {
		notes = append(notes, fmt.Sprintf("Part 2: the member's loop is poll → commit → poll; of the p50 of %s from publish to poll answer, the publish request takes %s; "+
			"an event published while the member is between polls (committing, or in the membership transaction of its next poll) waits for the next fetch.",
			fmtMs(l.latency.P50), fmtMs(l.publish.P50)))
	}
	return notes
}

// groupsHow says how scenario 10 measures.
func groupsHow(sizes []int64, n int, publishFor time.Duration) string {
	return fmt.Sprintf("**Read throughput (part 1):** one %d-partition topic created through the API, filled with %s events (partitions %v) through the raw pool with "+
		"scenario 8's raw batch publish (batches of %d keyed events, one transaction each, 4 writers, offsets checked dense), then VACUUM ANALYZE and a CHECKPOINT. "+
		"Four runs read all of it, each after a CHECKPOINT, in the order raw 1 reader, Ferry 1 member, Ferry 4 members, raw 4 readers (the table is in shared buffers throughout). "+
		"Ferry: a new group per run (`start: earliest`); its members first join one after another with a poll of `max_events` 1 (committed, not counted), so that the "+
		"assignment is settled before the measured run; then every member (its own consumer id) loops `POST .../poll` `{\"max_events\": %d, \"wait_seconds\": 0, "+
		"\"session_timeout_seconds\": %d}`, decodes every field of the answer, and `POST .../commit`s the highest offset per partition, until a poll comes back empty; "+
		"afterwards the group is described and every partition's lag must be 0. Raw: reader r of R reads the partitions p with p mod R = r, round-robin a batch at a time, "+
		"with `SELECT id, type, key, data::text, attributes::text, partition, \"offset\", published_at FROM ferry.events WHERE topic_id = $1 AND partition = $2 AND \"offset\" >= $3 "+
		"ORDER BY \"offset\" LIMIT %d` (the columns Ferry reads), then `UPDATE ferry.group_partitions SET committed_offset = $3, fetch_offset = $3 + 1 WHERE group_id = $1 AND partition = $2` "+
		"(the position row of a group the bench inserts into Ferry's tables), each its own autocommit statement. Events/s = events read in the run ÷ its wall time "+
		"(first poll to the last member's empty poll). CPU, WAL, transactions and waits as in scenarios 1-3, over the run. "+
		"pg_stat_statements (track = top) is on for the whole scenario, on both sides, and reset around each run and part 2's window; the bench's own sampling statements are left out. "+
		"**Publish → poll latency (part 2):** a new topic; one member long-polls `{\"max_events\": %d, \"wait_seconds\": %d, \"session_timeout_seconds\": %d}` in a loop "+
		"and commits after every poll that returned events; single-event publishes (`POST /v1/topics/{t}/events`, client-given ids) start from a schedule at %d events/s "+
		"for %s (open loop, each in its own goroutine), after a %s warm-up at the same rate, all polled first. Latency = the time the poll answer carrying the event was read "+
		"− the time just before its publish request was sent; every event must arrive within 10 s of the last publish. "+
		"**Rebalance (part 3):** a new topic, nothing published; members A and B each loop polls `{\"wait_seconds\": %d, \"session_timeout_seconds\": %d}`. "+
		"Once both answers list 2 partitions in the same generation, B stops after its current poll; T is when that last poll was answered. The time reported is T → the "+
		"first answer to A that lists all %d partitions. Eviction is lazy: B's session expires %d s after its last_seen (updated by its last fetch, just before T), and "+
		"the first poll of A that starts after that evicts it in its first transaction and lists the new partitions, but, nothing being published, is answered only after "+
		"its %d s wait; so ≈ %d s + up to one poll interval (≈ %d s) + %d s is expected.",
		topicPartitions, fmtInt(int64(n)), sizes, groupBatch, groupBatch, groupSession, groupBatch,
		groupBatch, groupWait, groupSession, groupRate, publishFor, time.Second/2,
		rebalanceWait, rebalanceSession, topicPartitions, rebalanceSession, rebalanceWait,
		rebalanceSession, rebalanceWait, rebalanceWait)
}

// rebalanceTimeline is part 3's polls of member A, times relative to T;
// a long one keeps 4 polls at each end.
func rebalanceTimeline(shown []memberPoll, t time.Time) [][]string {
	const keep = 4 // polls shown at each end of a long timeline
	var rows [][]string
	for i, p := range shown {
		if len(shown) > 2*keep+1 && i == keep {
			mid := shown[keep : len(shown)-keep]
			rows = append(rows, []string{
				fmt.Sprintf("… %d more polls …", len(mid)),
				fmt.Sprintf("%+.3f s … %+.3f s", mid[0].at.Sub(t).Seconds(), mid[len(mid)-1].at.Sub(t).Seconds()),
				"", ""})
		}
		if len(shown) > 2*keep+1 && i >= keep && i < len(shown)-keep {
			continue
		}
		rows = append(rows, []string{
			fmt.Sprintf("%+.3f s", p.sent.Sub(t).Seconds()),
			fmt.Sprintf("%+.3f s", p.at.Sub(t).Seconds()),
			strconv.FormatInt(p.generation, 10),
			fmt.Sprint(p.partitions),
		})
	}
	return rows
}
