package main

import (
	"fmt"
	"time"
)

// leaveSection is scenario 12's report: the graceful rounds' takeover
// times against the crash's.
func leaveSection(graceful []takeover, crash takeover) *Section {
	pick := func(f func(takeover) time.Duration) Summary {
		var ds []time.Duration
		for _, r := range graceful {
			ds = append(ds, f(r))
		}
		return Summarize(ds)
	}
	delivered, woken, assigned, call := pick(func(r takeover) time.Duration { return r.delivered }),
		pick(func(r takeover) time.Duration { return r.woken }), pick(func(r takeover) time.Duration { return r.assigned }),
		pick(func(r takeover) time.Duration { return r.leaveCall })
	dist := func(s Summary) string { return fmt.Sprintf("p50 %s, max %s", fmtMs(s.P50), fmtMs(s.Max)) }
	target, ok := verdict("< 100 ms", delivered.Max < 100*time.Millisecond)
	// B's session runs from its last fetch, at the start of its last poll
	// (up to one wait before T); the evicting poll finds B's events.
	session, wait := rebalanceSession*time.Second, rebalanceWait*time.Second
	crashOK := crash.delivered >= session-wait-wait/2 && crash.delivered <= session+2*wait+wait/2
	crashTarget, crashPass := verdict(fmt.Sprintf("crash: %d s session from B's last fetch (T − ≤ %d s) + ≤ 1 poll", rebalanceSession, rebalanceWait), crashOK)
	return &Section{
		Columns: &Columns{Raw: "after a crash", Ferry: "after a graceful leave", Ratio: "crash ÷ leave"},
		Rows: []Row{
			{Metric: "T → member A's first answer with an event of B's partitions", Raw: fmtMs(crash.delivered),
				Ferry: dist(delivered), Ratio: fmt.Sprintf("%.0f×", float64(crash.delivered)/float64(max(delivered.P50, time.Microsecond))), Target: "leave " + target, Pass: ok},
			{Metric: "the same, after a crash", Raw: fmtMs(crash.delivered), Ferry: "—", Target: crashTarget, Pass: crashPass},
			{Metric: "T → member A's first answer listing all partitions", Raw: fmtMs(crash.assigned), Ferry: dist(assigned)},
			{Metric: "T → member A's answer to the poll waiting at T", Raw: fmtMs(crash.woken), Ferry: dist(woken)},
			{Metric: "leave request round trip", Raw: "—", Ferry: dist(call)},
		},
		How: fmt.Sprintf("A new %d-partition topic; per round a new group, members A and B each looping `POST .../poll` `{\"max_events\": 100, \"wait_seconds\": %d, "+
			"\"session_timeout_seconds\": %d, \"start\": \"latest\"}` and committing what they get. Once both answers list 2 partitions in the same generation, B stops after "+
			"its current poll, and one event is published to each of B's partitions (B never reads them). Graceful (%d rounds): B then calls `POST .../leave`; T is its 204. "+
			"Crash (1 round): B does nothing more; T is B's last poll answered. Times from T to A's answers (the time the answer was read). "+
			"Expected: after a leave, A's waiting poll is woken (the leave wakes the group's long polls and a poll ends when the generation moves), A's next poll "+
			"owns all partitions and finds B's events at once: < 100 ms. After a crash, B's partitions move only when its session has expired, %d s after its last fetch "+
			"(which began B's last poll, up to one wait of %d s before T), and a poll of A evicts it: ≈ %d s − up to %d s + up to one poll's wait.",
			topicPartitions, rebalanceWait, rebalanceSession, len(graceful), rebalanceSession, rebalanceWait, rebalanceSession, rebalanceWait),
		Notes: []string{"Without traffic on the leaver's partitions, the answer listing them may come a poll's wait later (nothing to return); the first row is the takeover that matters: the leaver's unread events reaching the member that is left."},
	}
}
