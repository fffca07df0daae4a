package main

import (
	"context"
	"fmt"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario 10, part 2: publish → poll latency of a long-polling member
// at a fixed publish rate.

// groupLatency is part 2's outcome.
type groupLatency struct {
	publishLatency // publish → the poll answer carrying the event
	latencyPolls   // in the measured window
	stmts          stmtList
	stmtsOK        bool
	elapsed        time.Duration
}

// latencyPolls counts the long-polling member's polls.
type latencyPolls struct {
	polls, pollsWithEvents int64
	commits                int64
	// emptyPolls answered without events, and their mean duration: with
	// events every 10 ms, a working long poll has none.
	emptyPolls int64
	emptyMean  time.Duration
}

// latencyMember is part 2's member: it long-polls and commits after every
// poll that returned events, recording the events' arrivals, until ctx
// ends or a request fails.
type latencyMember struct {
	polls, pollsWithEvents, commits atomic.Int64
	emptyPolls, emptyNanos          atomic.Int64
}

func (b *Bench) runLatencyMember(ctx context.Context, topic, group, member string, m *latencyMember, a *arrivals) {
	for ctx.Err() == nil {
		sent := time.Now()
		r, err := b.client.GroupPoll(ctx, topic, group, groupPollRequest{
			Consumer: member, MaxEvents: groupBatch, WaitSeconds: groupWait, SessionTimeoutSeconds: groupSession})
		at := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				a.fail(err)
			}
			return
		}
		m.polls.Add(1)
		if len(r.Events) == 0 {
			m.emptyPolls.Add(1)
			m.emptyNanos.Add(int64(at.Sub(sent)))
			continue
		}
		m.pollsWithEvents.Add(1)
		for _, e := range r.Events {
			a.record(e.ID, at)
		}
		if err := b.client.GroupCommit(ctx, topic, group, member, r.Generation, lastOffsets(r.Events)); err != nil {
			if ctx.Err() == nil {
				a.fail(fmt.Errorf("commit: %w", err))
			}
			return
		}
		m.commits.Add(1)
	}
}

// since is what the member did since an earlier reading.
func (m *latencyMember) since(earlier latencyPolls, emptyNanos int64) latencyPolls {
	p := latencyPolls{polls: m.polls.Load() - earlier.polls, pollsWithEvents: m.pollsWithEvents.Load() - earlier.pollsWithEvents,
		commits: m.commits.Load() - earlier.commits, emptyPolls: m.emptyPolls.Load() - earlier.emptyPolls}
	if p.emptyPolls > 0 {
		p.emptyMean = time.Duration((m.emptyNanos.Load() - emptyNanos) / p.emptyPolls)
	}
	return p
}

// measureGroupLatency runs part 2: one member long-polls (wait_seconds 10)
// and commits after every poll that returned events, while single events
// are published at groupRate.
func (b *Bench) measureGroupLatency(ctx context.Context, d time.Duration) (groupLatency, error) {
	var out groupLatency
	const topic, group, member = "bench-groups-latency", "latency", "member-0"
	if _, err := b.createTopic(ctx, topic); err != nil {
		return out, err
	}
	// Join (creates the group at the head of the empty topic).
	if _, err := b.client.GroupPoll(ctx, topic, group, groupPollRequest{
		Consumer: member, MaxEvents: groupBatch, SessionTimeoutSeconds: groupSession, Start: "latest"}); err != nil {
		return out, fmt.Errorf("join: %w", err)
	}
	var (
		m                latencyMember
		arrived          = newArrivals()
		cwg              sync.WaitGroup
		cctx, stopMember = context.WithCancel(ctx)
	)
	cwg.Add(1)
	go pprof.Do(cctx, pprof.Labels("role", "client", "load", "groups/latency-consumer"), func(ctx context.Context) {
		defer cwg.Done()
		b.runLatencyMember(ctx, topic, group, member, &m, arrived)
	})
	defer func() {
		stopMember()
		cwg.Wait()
	}()

	keys := eventKeys()
	warm, err := b.warmUp(ctx, b.restPublisher(topic), "evt_grp_warmup", groupRate, keys, arrived, "polled")
	if err != nil {
		return out, err
	}
	var pubs []timedPublish
	measure := func() error {
		before := latencyPolls{polls: m.polls.Load(), pollsWithEvents: m.pollsWithEvents.Load(), commits: m.commits.Load(), emptyPolls: m.emptyPolls.Load()}
		emptyNanos := m.emptyNanos.Load()
		var err error
		pubs, out.elapsed, err = b.publishAndAwait(ctx, b.restPublisher(topic), "evt_grp", int(d.Seconds()*groupRate), groupRate, keys, arrived, warm)
		out.latencyPolls = m.since(before, emptyNanos)
		return err
	}
	if out.stmts, out.stmtsOK, err = b.countStatements(ctx, false, measure); err != nil {
		return out, err
	}
	out.publishLatency = tallyPublishes(pubs, arrived)
	progress("  publish → poll: p50 %s p99 %s max %s (%d of %d received, %d polls)",
		fmtMs(out.latency.P50), fmtMs(out.latency.P99), fmtMs(out.latency.Max), out.arrived, out.published, out.polls)
	return out, nil
}
