package main

import (
	"context"
	"fmt"
	"time"
)

// The flows of scenario 15: what each produces and consumes, and how its
// backlog is made.

// heldQueue is a queue: sends of heldBatch messages, receive(heldBatch) +
// ack, the backlog inserted in bulk.
func (b *Bench) heldQueue(ctx context.Context, tag string, backlog int) (heldOps, int64, error) {
	if err := b.resetFanout(ctx); err != nil {
		return heldOps{}, 0, err
	}
	name := "bench-held-" + tag
	id, err := b.createQueue(ctx, name)
	if err != nil {
		return heldOps{}, 0, err
	}
	if err := b.fill(ctx, id, backlog); err != nil {
		return heldOps{}, 0, err
	}
	req := SendRequest(heldBatch)
	return heldOps{
		produce: func(ctx context.Context) error { return b.client.Send(ctx, name, req) },
		consume: timedReceiveAck(b.client, QueueTarget(name)),
	}, int64(backlog), nil
}

// heldSubscription is a topic with one pull subscription: publishes of
// heldBatch events, receive(heldBatch) + ack on the subscription, the
// backlog published through the API.
func (b *Bench) heldSubscription(ctx context.Context, tag string, backlog int) (heldOps, int64, error) {
	name, err := b.heldTopic(ctx, tag, func(name string, id int64) error {
		_, err := b.createSubscription(ctx, name, id, "sub", `{}`)
		return err
	}, backlog)
	if err != nil {
		return heldOps{}, 0, err
	}
	req := PublishRequest(eventKeys()[:heldBatch])
	return heldOps{
		produce: func(ctx context.Context) error { return b.client.Publish(ctx, name, req) },
		consume: timedReceiveAck(b.client, SubscriptionTarget(name, "sub")),
	}, int64(backlog), nil
}

// heldGroup is a topic read by a consumer group of one member: publishes
// of heldBatch events, polls of up to heldGroupBatch events (no wait),
// each committed.
func (b *Bench) heldGroup(ctx context.Context, tag string, backlog int) (heldOps, int64, error) {
	name, err := b.heldTopic(ctx, tag, nil, backlog)
	if err != nil {
		return heldOps{}, 0, err
	}
	const group = "g"
	joined, err := joinGroup(ctx, b.client, name, group, 1)
	if err != nil {
		return heldOps{}, 0, err
	}
	req := PublishRequest(eventKeys()[:heldBatch])
	poll := groupPollRequest{Consumer: memberName(0), MaxEvents: heldGroupBatch, SessionTimeoutSeconds: groupSession}
	return heldOps{
		produce: func(ctx context.Context) error { return b.client.Publish(ctx, name, req) },
		consume: func(ctx context.Context) (int, time.Duration, error) {
			t0 := time.Now()
			r, err := b.client.GroupPoll(ctx, name, group, poll)
			took := time.Since(t0)
			if err != nil || len(r.Events) == 0 {
				return 0, took, err
			}
			return len(r.Events), took, b.client.GroupCommit(ctx, name, group, memberName(0), r.Generation, lastOffsets(r.Events))
		},
	}, int64(backlog) - joined, nil
}

// heldTopic empties the tables, creates a topic (and, through subscribe,
// what reads it) and publishes the backlog through the API in batches of
// up to 1000 events, then VACUUM ANALYZE and a checkpoint. It returns the
// topic's name.
func (b *Bench) heldTopic(ctx context.Context, tag string, subscribe func(name string, id int64) error, backlog int) (string, error) {
	if err := b.resetFanout(ctx); err != nil {
		return "", err
	}
	name := "bench-held-" + tag
	id, err := b.createTopic(ctx, name)
	if err != nil {
		return "", err
	}
	if subscribe != nil {
		if err := subscribe(name, id); err != nil {
			return "", err
		}
	}
	started, keys := time.Now(), eventKeys()
	for done := 0; done < backlog; done += groupBatch {
		if err := b.client.Publish(ctx, name, PublishRequest(keys[:min(groupBatch, backlog-done)])); err != nil {
			return "", fmt.Errorf("backlog: %w", err)
		}
	}
	if _, err := b.raw.Exec(ctx, `VACUUM ANALYZE ferry.messages, ferry.events`); err != nil {
		return "", err
	}
	progress("  published a backlog of %d events in %s", backlog, time.Since(started).Round(100*time.Millisecond))
	return name, b.checkpoint(ctx)
}

// timedReceiveAck is the consumer of a queue or a subscription (by path):
// receive(heldBatch) without waiting, then ack what came.
func timedReceiveAck(c *FerryClient, path Target) func(ctx context.Context) (int, time.Duration, error) {
	return func(ctx context.Context) (int, time.Duration, error) {
		t0 := time.Now()
		receipts, err := c.ReceiveFrom(ctx, path, heldBatch, 0)
		took := time.Since(t0)
		if err != nil || len(receipts) == 0 {
			return 0, took, err
		}
		return len(receipts), took, c.AckAt(ctx, path, receipts)
	}
}
