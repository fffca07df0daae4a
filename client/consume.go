package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// GroupHandler handles one event of a consumer group's partition. nil
// marks it done; an error retries it (the partition waits: its events are
// handled in offset order); an error wrapped by [Permanent] skips it. A
// panic is an error.
type GroupHandler func(ctx context.Context, e *Event) error

// ConsumeOptions tune [Client.Consume]. Consumer is required.
type ConsumeOptions struct {
	// Consumer is the member's id: stable across the worker's polls and
	// restarts, different for each worker.
	Consumer string
	// MaxEvents is the most events of one poll (default 100).
	MaxEvents int
	// WaitSeconds is each poll's long poll (default 10; less than the
	// session timeout).
	WaitSeconds int
	// SessionTimeoutSeconds is how long the member stays without polling
	// or committing (default 30). One handler call that lasts longer than
	// it loses the member its partitions (its commit is then fenced).
	SessionTimeoutSeconds int
	// CommitEvery is how often a partition's progress within a batch is
	// committed (default a third of the session timeout, which keeps the
	// member alive); the rest is committed when the batch ends. A fenced
	// commit stops the partition, so a shorter CommitEvery notices a lost
	// partition sooner, at one commit per event at the extreme.
	CommitEvery time.Duration
	// Start is where a group the first poll creates begins ("latest" by
	// default, "earliest", or an RFC 3339 time).
	Start string
	// RetryMin and RetryMax bound the wait before an event whose handler
	// failed is handled again (default 1 s and 30 s, doubling).
	RetryMin, RetryMax time.Duration
	// DrainTimeout bounds the wait for running handlers once ctx ends
	// (default 30 s).
	DrainTimeout time.Duration
	// OnError, when set, is told of every error the loop goes on from.
	OnError func(error)
}

func (o ConsumeOptions) withDefaults() (ConsumeOptions, error) {
	if o.Consumer == "" {
		return o, errors.New("ferry: consume: ConsumeOptions.Consumer is required")
	}
	o.MaxEvents = cmp0(o.MaxEvents, 100)
	o.SessionTimeoutSeconds = cmp0(o.SessionTimeoutSeconds, 30)
	o.WaitSeconds = min(cmp0(o.WaitSeconds, 10), o.SessionTimeoutSeconds-1)
	o.CommitEvery = cmp0(o.CommitEvery, time.Duration(o.SessionTimeoutSeconds)*time.Second/3)
	o.RetryMin = cmp0(o.RetryMin, time.Second)
	o.RetryMax = max(cmp0(o.RetryMax, 30*time.Second), o.RetryMin)
	o.DrainTimeout = cmp0(o.DrainTimeout, 30*time.Second)
	return o, nil
}

// cmp0 is v, or def when v is not positive.
func cmp0[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// consumer is the state of one [Client.Consume].
type consumer struct {
	c            *Client
	topic, group string
	h            GroupHandler
	o            ConsumeOptions
}

func (k *consumer) report(err error) {
	if k.o.OnError != nil {
		k.o.OnError(err)
	}
}

// Consume is the consumer-group loop: it polls topic's group as member
// o.Consumer, hands the events to h (each partition's in offset order, the
// partitions of a poll at once), commits what is done, and polls again.
// A commit answered 409 (the partition went to another member: this one
// was fenced) stops the work on that partition; the next poll brings the
// member's new assignment. Polls answered 429, 503 or a network error are
// backed off and tried again; after an uncertain failure (503, network)
// the member leaves first, so that it resumes from the committed offsets
// rather than past events a lost answer held. Any other poll error ends
// the loop.
//
// When ctx ends Consume stops polling, lets running handlers finish (up to
// o.DrainTimeout), commits what they did, leaves the group (its partitions
// go to the other members at once) and returns ctx's error. Events are
// at-least-once: an event whose commit a crash prevented is handled again
// by the partition's next owner.
func (c *Client) Consume(ctx context.Context, topic, group string, h GroupHandler, o ConsumeOptions) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	k := &consumer{c: c, topic: topic, group: group, h: h, o: o}
	err = k.loop(ctx)
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if lerr := c.LeaveGroup(lctx, topic, group, o.Consumer); lerr != nil && !IsCode(lerr, "not_found") {
		k.report(fmt.Errorf("ferry: leave %s/%s: %w", topic, group, lerr))
	}
	return err
}

// loop polls and handles until ctx ends (its error) or a poll fails for
// good.
func (k *consumer) loop(ctx context.Context) error {
	fails, mustLeave := 0, false
	for ctx.Err() == nil {
		err := k.leaveIf(ctx, &mustLeave)
		var p *Polled
		if err == nil {
			p, err = k.c.PollGroup(ctx, k.topic, k.group, Poll{
				Consumer: k.o.Consumer, MaxEvents: k.o.MaxEvents, WaitSeconds: k.o.WaitSeconds,
				SessionTimeoutSeconds: k.o.SessionTimeoutSeconds, Start: k.o.Start,
			})
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if !transient(err) {
				return fmt.Errorf("ferry: consume %s/%s: %w", k.topic, k.group, err)
			}
			var e *Error
			mustLeave = mustLeave || !errors.As(err, &e) || e.Status != http.StatusTooManyRequests
			k.report(err)
			fails++
			_ = sleep(ctx, k.c.backoff(min(fails, 8), err))
			continue
		}
		fails = 0
		k.handleBatch(ctx, p)
	}
	return ctx.Err()
}

// leaveIf leaves the group when *must is set (clearing it on success).
func (k *consumer) leaveIf(ctx context.Context, must *bool) error {
	if !*must {
		return nil
	}
	if err := k.c.LeaveGroup(ctx, k.topic, k.group, k.o.Consumer); err != nil && !IsCode(err, "not_found") {
		return err
	}
	*must = false
	return nil
}

// handleBatch runs one goroutine per partition of the poll's events and
// waits for them (up to the drain bound once ctx ends).
func (k *consumer) handleBatch(ctx context.Context, p *Polled) {
	byPart := map[int][]*Event{}
	var order []int
	for i := range p.Events {
		e := &p.Events[i]
		if _, ok := byPart[e.Partition]; !ok {
			order = append(order, e.Partition)
		}
		byPart[e.Partition] = append(byPart[e.Partition], e)
	}
	life, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	var wg sync.WaitGroup
	for _, part := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.partition(ctx, life, p.Generation, part, byPart[part])
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done:
		case <-time.After(k.o.DrainTimeout):
		}
	}
}

// partition handles one partition's events in order and commits them as
// it goes: at the end, and whenever CommitEvery passed since its last
// commit. A fenced commit stops it.
func (k *consumer) partition(ctx, life context.Context, gen int64, part int, events []*Event) {
	every := k.o.CommitEvery
	last, done := time.Now(), int64(-1)
	commit := func() bool {
		if done < 0 {
			return true
		}
		err := k.c.CommitGroup(life, k.topic, k.group, k.o.Consumer, gen, map[int]int64{part: done})
		last = time.Now()
		if err != nil {
			// Kept for the next commit, unless the partition is gone.
			k.report(fmt.Errorf("ferry: commit %s/%s partition %d: %w", k.topic, k.group, part, err))
			return !IsCode(err, "conflict")
		}
		done = -1
		return true
	}
	for _, e := range events {
		if ctx.Err() != nil || !k.handleEvent(ctx, life, e) {
			break
		}
		done = e.Offset
		if time.Since(last) >= every && !commit() {
			return // fenced: the partition is another member's now
		}
	}
	commit()
}

// handleEvent runs the handler on e until it succeeds or fails
// permanently (true), or ctx ends first (false: e stays uncommitted).
func (k *consumer) handleEvent(ctx, life context.Context, e *Event) bool {
	wait := k.o.RetryMin
	for {
		err := k.call(life, e)
		if err == nil {
			return true
		}
		if IsPermanent(err) {
			k.report(fmt.Errorf("ferry: event %s (partition %d offset %d) skipped: %w", e.ID, e.Partition, e.Offset, err))
			return true
		}
		k.report(fmt.Errorf("ferry: event %s (partition %d offset %d) failed: %w", e.ID, e.Partition, e.Offset, err))
		if sleep(ctx, wait) != nil {
			return false
		}
		wait = min(2*wait, k.o.RetryMax)
	}
}

// call runs the handler, turning a panic into an error.
func (k *consumer) call(ctx context.Context, e *Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return k.h(ctx, e)
}
