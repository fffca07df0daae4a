package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/ferry-mq/ferry/store"
)

// Scenario 12: how soon a member's partitions reach the member that is
// left, after a graceful leave (POST .../leave) against after a crash (the
// member stops polling and its session times out). Members A and B share
// a 4-partition topic, polling in a loop with scenario 10 part 3's
// settings (session 5 s, wait 1 s); B stops, and one event is published to
// each of B's partitions, which B never reads; then B leaves (graceful)
// or not (crash). Measured from T (the leave's 204, or B's last poll
// answered): A's first answer listing every partition, and A's first
// answer carrying an event of B's partitions.

// takeover is one round's outcome.
type takeover struct {
	assigned  time.Duration // T → A's first answer listing every partition
	delivered time.Duration // T → A's first answer with an event of B's partitions
	woken     time.Duration // T → A's first answer after T (the poll in flight at T)
	leaveCall time.Duration // the leave request's round trip (graceful)
}

// publishToPartitions publishes one event to each partition named.
func (b *Bench) publishToPartitions(ctx context.Context, topic string, parts []int) error {
	type ev struct {
		Type string `json:"type"`
		Key  string `json:"key"`
		Data any    `json:"data"`
	}
	var evs []ev
	for _, p := range parts {
		for i := 0; ; i++ {
			if k := fmt.Sprintf("k-%d", i); store.PartitionForKey(k, topicPartitions) == p {
				evs = append(evs, ev{Type: eventType, Key: k, Data: map[string]int{"partition": p}})
				break
			}
		}
	}
	req, err := json.Marshal(map[string]any{"events": evs})
	if err != nil {
		return err
	}
	return b.client.Publish(ctx, topic, req)
}

// measureTakeover runs one round on a new group of topic.
func (b *Bench) measureTakeover(ctx context.Context, topic, group string, graceful bool) (takeover, error) {
	var out takeover
	pair, lastB, err := b.settledPair(ctx, topic, group, 100)
	if err != nil {
		return out, err
	}
	defer pair.close()
	if err := b.publishToPartitions(ctx, topic, lastB.partitions); err != nil {
		return out, fmt.Errorf("publish: %w", err)
	}
	t := lastB.at
	if graceful {
		sent := time.Now()
		if err := b.client.GroupLeave(ctx, topic, group, "member-b"); err != nil {
			return out, err
		}
		t = time.Now()
		out.leaveCall = t.Sub(sent)
	}
	got, err := pair.firstOfA(ctx, "member A getting B's events", time.Duration(rebalanceSession+15)*time.Second, t, func(p memberPoll) bool {
		return slices.ContainsFunc(p.eventParts, func(ep int) bool { return slices.Contains(lastB.partitions, ep) })
	})
	if err != nil {
		return out, err
	}
	out.delivered = got.at.Sub(t)
	ps, _ := pair.a.snapshot()
	for _, p := range ps {
		if !p.at.After(t) {
			continue
		}
		if out.woken == 0 {
			out.woken = p.at.Sub(t)
		}
		if out.assigned == 0 && len(p.partitions) == topicPartitions {
			out.assigned = p.at.Sub(t)
		}
	}
	return out, nil
}

// leaveRebalance is scenario 12.
func (b *Bench) leaveRebalance(ctx context.Context) (*Section, error) {
	const topic = "bench-leave"
	rounds := 10
	if b.opts.Quick {
		rounds = 4
	}
	if _, err := b.createTopic(ctx, topic); err != nil {
		return nil, err
	}
	defer func() {
		if err := b.deleteTopic(context.WithoutCancel(ctx), topic); err != nil {
			progress("  delete topic %s: %v", topic, err)
		}
	}()
	var graceful []takeover
	for i := range rounds {
		r, err := b.measureTakeover(ctx, topic, fmt.Sprintf("leave-%d", i), true)
		if err != nil {
			return nil, fmt.Errorf("graceful round %d: %w", i, err)
		}
		progress("  graceful leave %d: B's events at A after %s (A's waiting poll woken after %s, all partitions listed after %s; leave call %s)",
			i, fmtMs(r.delivered), fmtMs(r.woken), fmtMs(r.assigned), fmtMs(r.leaveCall))
		graceful = append(graceful, r)
	}
	crash, err := b.measureTakeover(ctx, topic, "crash", false)
	if err != nil {
		return nil, fmt.Errorf("crash round: %w", err)
	}
	progress("  crash: B's events at A after %s (all partitions listed after %s)", fmtMs(crash.delivered), fmtMs(crash.assigned))
	return leaveSection(graceful, crash), nil
}

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
