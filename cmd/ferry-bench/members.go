package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Two members of a consumer group polling in a loop, one of which stops:
// the machinery of scenario 10 part 3 (rebalance after a crash) and of
// scenario 12 (takeover after a leave or a crash).

// memberPoll is one answer to a polling member.
type memberPoll struct {
	sent, at   time.Time
	generation int64
	partitions []int
	eventParts []int // partitions of the events it carried
}

// memberLog is what a polling member saw.
type memberLog struct {
	mu    sync.Mutex
	polls []memberPoll
	err   error
}

// snapshot is the polls so far and the error that stopped the member.
func (l *memberLog) snapshot() ([]memberPoll, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.polls), l.err
}

// last is the member's last answer; ok says whether it had one.
func (l *memberLog) last() (p memberPoll, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.polls) == 0 {
		return memberPoll{}, false
	}
	return l.polls[len(l.polls)-1], true
}

// runMember polls (wait rebalanceWait, session rebalanceSession, start
// latest) in a loop until stop closes or ctx ends, logging every answer
// and committing the events it got (a fenced commit is fine: the next
// poll tells the new assignment).
func (b *Bench) runMember(ctx context.Context, topic, group, consumer string, maxEvents int, stop <-chan struct{}, log *memberLog) {
	req := groupPollRequest{Consumer: consumer, MaxEvents: maxEvents, WaitSeconds: rebalanceWait,
		SessionTimeoutSeconds: rebalanceSession, Start: "latest"}
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		sent := time.Now()
		r, err := b.client.GroupPoll(ctx, topic, group, req)
		at := time.Now()
		if err == nil && len(r.Events) > 0 {
			err = b.client.GroupCommit(ctx, topic, group, consumer, r.Generation, lastOffsets(r.Events))
			if errors.Is(err, errFenced) {
				err = nil
			}
		}
		p := memberPoll{sent: sent, at: at, generation: r.Generation, partitions: r.Partitions}
		for _, e := range r.Events {
			p.eventParts = append(p.eventParts, e.Partition)
		}
		log.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				log.err = fmt.Errorf("%s: %w", consumer, err)
			}
			log.mu.Unlock()
			return
		}
		log.polls = append(log.polls, p)
		log.mu.Unlock()
	}
}

// memberPair is members A and B of a group, polling in a loop.
type memberPair struct {
	a, b         memberLog
	stopA, stopB chan struct{}
	cancel       context.CancelFunc
	wg           sync.WaitGroup
}

// settledPair starts member A, then, after A's first answer, member B,
// waits until both answers list 2 partitions in the same generation, and
// stops B after its current poll. It returns the pair (A still polling;
// stop it with close) and B's last answer.
func (b *Bench) settledPair(ctx context.Context, topic, group string, maxEvents int) (*memberPair, memberPoll, error) {
	ctx, cancel := context.WithCancel(ctx)
	m := &memberPair{stopA: make(chan struct{}), stopB: make(chan struct{}), cancel: cancel}
	doneB := make(chan struct{})
	m.wg.Add(2)
	go func() { defer m.wg.Done(); b.runMember(ctx, topic, group, "member-a", maxEvents, m.stopA, &m.a) }()
	fail := func(err error) (*memberPair, memberPoll, error) {
		m.close()
		return nil, memberPoll{}, err
	}
	if err := m.await(ctx, "member A's first poll", 10*time.Second, func() bool { _, ok := m.a.last(); return ok }); err != nil {
		return fail(err)
	}
	go func() {
		defer m.wg.Done()
		defer close(doneB)
		b.runMember(ctx, topic, group, "member-b", maxEvents, m.stopB, &m.b)
	}()
	if err := m.await(ctx, "two members with 2 partitions each", 15*time.Second, func() bool {
		a, _ := m.a.last()
		bb, ok := m.b.last()
		return ok && len(a.partitions) == 2 && len(bb.partitions) == 2 && a.generation == bb.generation
	}); err != nil {
		return fail(err)
	}
	close(m.stopB)
	select {
	case <-doneB:
	case <-time.After(10 * time.Second):
		return fail(errors.New("member B did not stop"))
	}
	lastB, _ := m.b.last()
	if _, err := m.b.snapshot(); err != nil {
		return fail(err)
	}
	return m, lastB, nil
}

// firstOfA waits (up to limit) for member A's first answer after t for
// which cond holds, then stops A and returns that answer.
func (m *memberPair) firstOfA(ctx context.Context, what string, limit time.Duration, t time.Time, cond func(memberPoll) bool) (memberPoll, error) {
	var got memberPoll
	err := m.await(ctx, what, limit, func() bool {
		ps, _ := m.a.snapshot()
		for _, p := range ps {
			if p.at.After(t) && cond(p) {
				got = p
				return true
			}
		}
		return false
	})
	if err == nil {
		close(m.stopA)
	}
	return got, err
}

// close stops both members and waits for them.
func (m *memberPair) close() {
	m.cancel()
	m.wg.Wait()
}

// await checks cond every 2 ms until it holds, a member fails, or limit
// passes.
func (m *memberPair) await(ctx context.Context, what string, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		for _, l := range []*memberLog{&m.a, &m.b} {
			if _, err := l.snapshot(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s", what, limit)
		}
		sleepUntil(ctx, time.Now().Add(2*time.Millisecond))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}
