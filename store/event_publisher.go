package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Publisher appends events with group commit, as [Sender] does for
// messages: publishes that arrive while a transaction commits are merged,
// per topic, into the next one. That matters more for topics than for
// queues: a publish holds its partitions' locks until it commits, so
// publishes to one partition commit one after another, and only sharing
// transactions lets them share a commit. Every request is answered after
// the transaction holding it committed.
//
// The write itself is EventPublishTx's (one publishBatch), run as a
// transaction of its own whose BEGIN and COMMIT travel with its two round
// trips (as [EventPublish] does). The Publisher only merges requests,
// commits, writes the requests of a failed merged transaction again one
// by one, and wakes. Its [Spreader] spreads keyless events round-robin, per
// topic, over everything it publishes; its filterCache keeps the parsed
// filters of the subscriptions it fans out to.
type Publisher struct {
	pool      *pgxpool.Pool
	c         *coalescer[*publishRequest]
	published func(topicIDs, subscriptionIDs []int64)
	spread    Spreader
	filters   filterCache
}

type publishRequest struct {
	ctx     context.Context
	topic   Topic
	events  []PublishEvent
	results []PublishResult
	err     error
	done    chan struct{}
}

// PublisherConfig configures [NewPublisher].
type PublisherConfig struct {
	// Workers is the number of transactions in progress at once (default 4).
	Workers int
	// MaxEvents caps the events of one transaction (default 2000).
	MaxEvents int
	// Published, if set, is called after every commit with the ids of the
	// topics that got events and of the subscriptions that got deliveries
	// (used to wake long polls and push workers).
	Published func(topicIDs, subscriptionIDs []int64)
}

// NewPublisher starts a Publisher's workers; Close stops them.
func NewPublisher(pool *pgxpool.Pool, cfg PublisherConfig) *Publisher {
	p := &Publisher{pool: pool, published: cfg.Published}
	p.c = newCoalescer(cfg.Workers, cfg.MaxEvents, 100, func(r *publishRequest) int { return len(r.events) }, p.write)
	return p
}

// Close stops the workers after the requests already taken are written.
func (p *Publisher) Close() { p.c.close() }

// Publish appends events to topic t, as [EventPublish] does, sharing the
// transaction with concurrent publishes to the same topic.
//
// A transaction of the [Publisher] waits only claimWaitMerged for an event
// id that another transaction claimed (so that one request cannot hold up
// the requests merged with it, nor a worker, for long). A request that
// fails busy that way is submitted again, after a short pause, until
// busyWait has passed since it was first submitted: a claim held by
// another REST publish (milliseconds; more on a loaded machine) is waited
// out, one held by an application's open transaction answers [ErrBusy]
// after busyWait, as a send's lock wait does.
func (p *Publisher) Publish(ctx context.Context, t Topic, events []PublishEvent) ([]PublishResult, error) {
	// Ids are given before queueing, so a publish written again after a
	// failed merged transaction keeps them (and its dedup protection).
	events = slices.Clone(events)
	for i := range events {
		if events[i].ID == "" {
			events[i].ID = NewEventID()
		}
	}
	deadline := time.Now().Add(busyWait)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		req := &publishRequest{ctx: ctx, topic: t, events: events, done: make(chan struct{})}
		if err := p.c.submit(ctx, req); err != nil {
			return nil, fmt.Errorf("event publish: %w", err)
		}
		<-req.done // a taken request is always answered
		if !errors.Is(req.err, ErrBusy) || time.Now().Add(pause).After(deadline) {
			return req.results, req.err
		}
		timer := time.NewTimer(pause)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, req.err
		}
	}
}

// busyWait bounds how long Publish tries again a request that failed
// busy: as long as a send waits for a lock (sendLockTimeout).
const busyWait = 5 * time.Second

// write publishes batch, one transaction per topic. If the database
// refused a merged transaction, its requests are retried one by one, so
// one request's failure cannot fail the others; a lost connection fails
// them all at once (see Sender.write).
func (p *Publisher) write(batch []*publishRequest) {
	ctx := context.Background() // a taken request is written to the end
	byTopic := map[int64][]*publishRequest{}
	var order []int64
	for _, r := range batch {
		if r.ctx.Err() != nil {
			r.err = r.ctx.Err()
			close(r.done)
			continue
		}
		if byTopic[r.topic.ID] == nil {
			order = append(order, r.topic.ID)
		}
		byTopic[r.topic.ID] = append(byTopic[r.topic.ID], r)
	}
	var written, fed []int64
	for _, id := range order {
		reqs := byTopic[id]
		if subs, err := p.publish(ctx, reqs); err == nil {
			written = append(written, id)
			fed = append(fed, subs...)
		} else if len(reqs) > 1 && retryEachAlone(err) {
			for _, r := range reqs {
				if subs, err := p.publish(ctx, []*publishRequest{r}); err == nil {
					written = append(written, id)
					fed = append(fed, subs...)
				}
			}
		}
	}
	if len(written) > 0 && p.published != nil {
		p.published(written, fed)
	}
	for _, reqs := range byTopic {
		for _, r := range reqs {
			close(r.done)
		}
	}
}

// publish writes reqs (all for one topic) in one transaction and sets
// their results, or their error. It returns the subscriptions fed.
func (p *Publisher) publish(ctx context.Context, reqs []*publishRequest) ([]int64, error) {
	t := reqs[0].topic
	var all []PublishEvent
	for _, r := range reqs {
		all = append(all, r.events...)
		if r.topic.Partitions > t.Partitions {
			t = r.topic // the freshest view of a growing topic
		}
	}
	out, err := eventPublish(ctx, p.pool, PublishParams{Topic: t, Events: all, Spreader: &p.spread}, &p.filters, claimWaitMerged)
	results := out.Results
	for _, r := range reqs {
		if err != nil {
			r.results, r.err = nil, err
			continue
		}
		r.results, r.err, results = results[:len(r.events)], nil, results[len(r.events):]
	}
	return out.Subscriptions, err
}
