package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Scenario 10, part 3: how long a group takes to give a silent member's
// partitions to the member that is left.

// rebalance is part 3's outcome.
type rebalance struct {
	stoppedAt          time.Time     // T: B's last poll answered
	took               time.Duration // T → A's first answer listing every partition
	evictingPollSentAt time.Duration // T → that poll sent (its transaction evicted B)
	lastSeenB          time.Duration // B's last_seen before T (its last fetch)
	genAtT, genAfter   int64
	gensSeenAfter      int // distinct generations in A's answers after T
	interval           time.Duration
	pollMean           time.Duration // mean duration of A's polls (all empty)
	shown              []memberPoll  // A's polls from the last before T to the one that got every partition
	members            string        // describe afterwards
	ok                 bool
}

// measureRebalance runs part 3: members A and B poll in a loop; B stops;
// the bench waits until A's poll answer lists every partition.
func (b *Bench) measureRebalance(ctx context.Context) (rebalance, error) {
	var out rebalance
	const topic, group = "bench-groups-rebalance", "rebalance"
	if _, err := b.createTopic(ctx, topic); err != nil {
		return out, err
	}
	pair, lastB, err := b.settledPair(ctx, topic, group, groupBatch)
	if err != nil {
		return out, err
	}
	defer pair.close()
	out.stoppedAt, out.genAtT = lastB.at, lastB.generation
	// B's last_seen as the group recorded it, read before A's polls
	// evict B (which deletes the row).
	var lastSeen time.Time
	if err := b.raw.QueryRow(ctx, `
		SELECT m.last_seen FROM ferry.group_members m
		JOIN ferry.consumer_groups g ON g.id = m.group_id
		JOIN ferry.topics t ON t.id = g.topic_id
		WHERE t.name = $1 AND g.name = $2 AND m.consumer = 'member-b'`, topic, group).Scan(&lastSeen); err == nil {
		out.lastSeenB = lastSeen.Sub(out.stoppedAt)
	} else {
		progress("  member B's last_seen: %v", err)
	}
	progress("  member B stopped (generation %d); waiting for member A to own all %d partitions", out.genAtT, topicPartitions)

	got, err := pair.firstOfA(ctx, "member A owning every partition", time.Duration(rebalanceSession+10)*time.Second, out.stoppedAt,
		func(p memberPoll) bool { return len(p.partitions) == topicPartitions })
	if err != nil {
		return out, err
	}
	out.took = got.at.Sub(out.stoppedAt)
	out.evictingPollSentAt = got.sent.Sub(out.stoppedAt)
	out.genAfter = got.generation

	all, _ := pair.a.snapshot()
	out.analyse(all, got)
	d, err := b.client.DescribeGroup(ctx, topic, group)
	if err != nil {
		return out, fmt.Errorf("describe: %w", err)
	}
	var ms []string
	for _, m := range d.Members {
		ms = append(ms, fmt.Sprintf("%s %v", m.Consumer, m.Partitions))
	}
	out.members = fmt.Sprintf("generation %d; members: %s", d.Generation, strings.Join(ms, ", "))
	out.ok = len(d.Members) == 1 && d.Members[0].Consumer == "member-a" && len(d.Members[0].Partitions) == topicPartitions
	progress("  rebalance: %s after B stopped (evicting poll sent at +%s), generation %d → %d",
		out.took.Round(time.Millisecond), out.evictingPollSentAt.Round(time.Millisecond), out.genAtT, out.genAfter)
	return out, nil
}

// analyse reads member A's polls, up to got, the first answer listing
// every partition: the generations seen after T, the polls' mean interval
// and duration, and the polls the report's timeline shows.
func (out *rebalance) analyse(all []memberPoll, got memberPoll) {
	gens := map[int64]bool{}
	var took time.Duration
	for i, p := range all {
		took += p.at.Sub(p.sent)
		if p.at.After(out.stoppedAt) && !p.at.After(got.at) {
			gens[p.generation] = true
		}
		if !p.at.After(got.at) && (p.at.After(out.stoppedAt) || (i+1 < len(all) && all[i+1].at.After(out.stoppedAt))) {
			out.shown = append(out.shown, p)
		}
	}
	out.gensSeenAfter = len(gens)
	if len(all) > 1 {
		out.interval = all[len(all)-1].sent.Sub(all[0].sent) / time.Duration(len(all)-1)
	}
	if len(all) > 0 {
		out.pollMean = took / time.Duration(len(all))
	}
}
