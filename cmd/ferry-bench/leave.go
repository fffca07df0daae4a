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
