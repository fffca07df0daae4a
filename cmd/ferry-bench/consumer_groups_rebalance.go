package main

import (
	"context"
	"fmt"
	"strconv"
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
	timeline           [][]string
	members            string // describe afterwards
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

	gens := map[int64]bool{}
	var (
		starts []time.Time
		took   time.Duration
		shown  []memberPoll // A's polls from the last before T to the one that got every partition
	)
	all, _ := pair.a.snapshot()
	for i, p := range all {
		starts = append(starts, p.sent)
		took += p.at.Sub(p.sent)
		if p.at.After(out.stoppedAt) && !p.at.After(got.at) {
			gens[p.generation] = true
		}
		if !p.at.After(got.at) && (p.at.After(out.stoppedAt) || (i+1 < len(all) && all[i+1].at.After(out.stoppedAt))) {
			shown = append(shown, p)
		}
	}
	out.gensSeenAfter = len(gens)
	if len(starts) > 1 {
		out.interval = starts[len(starts)-1].Sub(starts[0]) / time.Duration(len(starts)-1)
	}
	if len(all) > 0 {
		out.pollMean = took / time.Duration(len(all))
	}
	row := func(p memberPoll) []string {
		return []string{
			fmt.Sprintf("%+.3f s", p.sent.Sub(out.stoppedAt).Seconds()),
			fmt.Sprintf("%+.3f s", p.at.Sub(out.stoppedAt).Seconds()),
			strconv.FormatInt(p.generation, 10),
			fmt.Sprint(p.partitions),
		}
	}
	const keep = 4 // polls shown at each end of a long timeline
	for i, p := range shown {
		if len(shown) > 2*keep+1 && i == keep {
			mid := shown[keep : len(shown)-keep]
			out.timeline = append(out.timeline, []string{
				fmt.Sprintf("… %d more polls …", len(mid)),
				fmt.Sprintf("%+.3f s … %+.3f s", mid[0].at.Sub(out.stoppedAt).Seconds(), mid[len(mid)-1].at.Sub(out.stoppedAt).Seconds()),
				"", ""})
		}
		if len(shown) > 2*keep+1 && i >= keep && i < len(shown)-keep {
			continue
		}
		out.timeline = append(out.timeline, row(p))
	}
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
