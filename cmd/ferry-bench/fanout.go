package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Scenario 9: topic fan-out and push delivery. Part 1 publishes batches to
// a topic with N pull subscriptions, Ferry over HTTP against the same rows
// written by raw SQL; part 2 measures publish → push-delivered latency at a
// fixed offered load against an in-process receiver; part 3 counts, from
// pg_stat_statements, the SQL statements the server ran per delivery
// during part 2.

const (
	// fanoutBatch is the events per publish request (and raw transaction)
	// and fanoutClients the concurrent publishers of part 1.
	fanoutBatch, fanoutClients = 100, 8
	// pushRate is part 2's offered load, events per second.
	pushRate = 200
	// pushMaxInFlight is the push subscription's max_in_flight (the
	// default) and pushTimeout its timeout_seconds (the default).
	pushMaxInFlight, pushTimeout = 10, 10
	// pushP50Target and pushP99Target are the latency targets,
	// stmtsPerDeliveryTarget its statements target (Convoy: ~32).
	pushP50Target, pushP99Target = 50 * time.Millisecond, 250 * time.Millisecond
	stmtsPerDeliveryTarget       = 5.0
)

// fanoutSubCounts are the subscription counts of part 1.
func fanoutSubCounts() []int { return []int{1, 10, 100} }

// fanoutTimes are the measured time per side and subscription count in
// part 1, and part 2's publishing time.
func (b *Bench) fanoutTimes() (perSide, push time.Duration) {
	if b.opts.Quick {
		return time.Second, 2 * time.Second
	}
	return 4 * time.Second, 10 * time.Second
}

// rawFanoutAppend appends a batch whose offsets rawBumpPartition reserved
// earlier in the same transaction (as rawAppendEvents does) and writes one
// delivery per event and subscription ($8): the subscription's
// ferry.messages row, with the event as its body in the shape Ferry
// stores it.
const rawFanoutAppend = `
	WITH ev AS (
		INSERT INTO ferry.events (topic_id, partition, "offset", id, type, key, data, published_at)
		SELECT $1, t.partition, p.next_offset - t.back, t.id, $2, t.key, t.data::jsonb, clock_timestamp()
		FROM unnest($3::int[], $4::bigint[], $5::text[], $6::text[], $7::text[]) WITH ORDINALITY AS t(partition, back, id, key, data, ord)
		JOIN ferry.topic_partitions p ON p.topic_id = $1 AND p.partition = t.partition
		ORDER BY t.ord
		RETURNING partition, "offset", id, type, key, data, published_at
	)
	INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, sent_at, event_id, body)
	SELECT s.queue_id, nextval('ferry.message_id_seq'), e.published_at, false, e.published_at, e.id,
		jsonb_build_object('id', e.id, 'type', e.type, 'key', e.key, 'data', e.data, 'attributes', '{}'::jsonb,
			'partition', e.partition, 'offset', e."offset",
			'published_at', to_char(e.published_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::json
	FROM ev e CROSS JOIN unnest($8::bigint[]) AS s(queue_id)`

// rawFanoutBatch publishes one event per key and its deliveries to subs in
// one transaction (one pgx batch, one round trip): the partition bumps in
// partition order, then rawFanoutAppend.
func rawFanoutBatch(ctx context.Context, b *Bench, topicID int64, subs []int64, keys, data []string) error {
	e := rawEventsOf(keys)
	batch := e.bumps(topicID)
	batch.Queue(rawFanoutAppend, topicID, eventType, e.partitions, e.back, e.ids, e.keys, data, subs)
	return b.raw.SendBatch(ctx, batch).Close()
}

// truncateFanout lists the tables in the order a publish locks them
// (event_dedup first), so that a TRUNCATE meeting a publish cut at the end
// of a window waits for it instead of deadlocking with it.
const truncateFanout = `TRUNCATE ferry.event_dedup, ferry.events, ferry.messages, ferry.queue_counts, ferry.dedup, ferry.dead_letters`

// resetFanout empties the message and event tables, rewinds every
// partition and checkpoints.
func (b *Bench) resetFanout(ctx context.Context) error {
	return b.resetTopicTables(ctx, truncateFanout)
}

// createSubscription creates a subscription through the API with the
// given request body and returns its queue id.
func (b *Bench) createSubscription(ctx context.Context, topic string, topicID int64, name, req string) (int64, error) {
	if err := b.client.CreateSubscription(ctx, topic, name, req); err != nil {
		return 0, err
	}
	var id int64
	err := b.raw.QueryRow(ctx, `SELECT id FROM ferry.queues WHERE topic_id = $1 AND name = $2`, topicID, name).Scan(&id)
	return id, err
}

// deleteTopic deletes a topic through the API (its subscriptions with it).
func (b *Bench) deleteTopic(ctx context.Context, name string) error {
	return b.client.DeleteTopic(ctx, name)
}

// fanoutTopic is one side's topic of part 1 and its subscriptions.
type fanoutTopic struct {
	name string
	id   int64
	subs []int64
}

// setupFanoutTopic creates a topic with n pull subscriptions (no filter).
func (b *Bench) setupFanoutTopic(ctx context.Context, name string, n int) (*fanoutTopic, error) {
	id, err := b.createTopic(ctx, name)
	if err != nil {
		return nil, err
	}
	t := &fanoutTopic{name: name, id: id}
	for i := range n {
		sid, err := b.createSubscription(ctx, name, id, fmt.Sprintf("sub-%03d", i), `{}`)
		if err != nil {
			return nil, fmt.Errorf("subscription %d of %s: %w", i, name, err)
		}
		t.subs = append(t.subs, sid)
	}
	return t, nil
}

// checkFanout checks a topic after a window: dense offsets (as
// checkDensity does) and exactly one delivery per event and subscription.
// It returns the events counted.
//
// It reads everything in one statement (one snapshot): a Ferry publish
// whose request was cut at the end of the window may still commit.
func (b *Bench) checkFanout(ctx context.Context, s side, t *fanoutTopic) (int64, error) {
	var parts, n, bad, deliveries int64
	err := b.raw.QueryRow(ctx, `
		WITH p AS (
			SELECT p.partition, p.next_offset, count(e."offset") AS n,
				coalesce(min(e."offset"), 0) AS lo, coalesce(max(e."offset"), -1) AS hi
			FROM ferry.topic_partitions p
			LEFT JOIN ferry.events e ON e.topic_id = p.topic_id AND e.partition = p.partition
			WHERE p.topic_id = $1
			GROUP BY p.partition, p.next_offset
		)
		SELECT (SELECT count(*) FROM p), (SELECT coalesce(sum(n), 0)::bigint FROM p),
			(SELECT count(*) FROM p WHERE n <> hi + 1 OR lo <> 0 OR next_offset > hi + 1),
			(SELECT coalesce(sum(messages), 0)::bigint FROM ferry.queue_counts WHERE queue_id = ANY($2))`,
		t.id, t.subs).Scan(&parts, &n, &bad, &deliveries)
	if err != nil {
		return 0, fmt.Errorf("fan-out check: %w", err)
	}
	if parts != topicPartitions || bad > 0 {
		err := &densityError{fmt.Sprintf("%s, topic %s: %d of %d partitions have offsets that are not dense from 0 to next_offset - 1",
			s, t.name, bad, parts)}
		progress("  %v", err)
		return 0, err
	}
	if want := n * int64(len(t.subs)); deliveries != want {
		return 0, fmt.Errorf("%s, topic %s: %d deliveries for %d events and %d subscriptions (want %d)",
			s, t.name, deliveries, n, len(t.subs), want)
	}
	return n, nil
}

// fanoutResult is part 1's outcome for one subscription count.
type fanoutResult struct {
	subs       int
	raw, ferry Phase
}

// measureFanout runs part 1 for n subscriptions: one window per side, each
// after resetFanout, raw first or Ferry first as rawFirst says. One long
// window rather than several short rounds: at N = 100 a transaction takes
// about a second, so per-round overhead (warm-up, requests in flight at the
// end, reset) would eat the time budget.
func (b *Bench) measureFanout(ctx context.Context, n int, perSide time.Duration, rawFirst bool, batchKeys [][]string, batchReqs [][]byte, checked *[2]int64) (fanoutResult, error) {
	res := fanoutResult{subs: n}
	topics := [2]*fanoutTopic{}
	var err error
	if topics[rawSide], err = b.setupFanoutTopic(ctx, fmt.Sprintf("bench-fanout-raw-%d", n), n); err != nil {
		return res, err
	}
	if topics[ferrySide], err = b.setupFanoutTopic(ctx, fmt.Sprintf("bench-fanout-ferry-%d", n), n); err != nil {
		return res, err
	}
	data := bodies(fanoutBatch)
	nBatches := int64(len(batchKeys))
	stride := nBatches / fanoutClients
	first := rawSide
	if !rawFirst {
		first = ferrySide
	}
	res.raw, res.ferry, _, err = b.rounds(ctx, perSide, 1, first, func(side) error { return b.resetFanout(ctx) }, func(s side, d time.Duration) (Phase, error) {
		t := topics[s]
		// Requests still running just after the window ends would not
		// count; they are cancelled there rather than waited for (with
		// 8 clients queued on the partition locks that would take up to
		// 8 transactions, seconds at N = 100).
		cut := time.Now().Add(warmupFor(d) + d + 5*time.Millisecond)
		op := numbered(fanoutClients, func(ctx context.Context, w int, i int64) (int, error) {
			j := (int64(w)*stride + i) % nBatches
			octx, cancel := context.WithDeadline(ctx, cut)
			defer cancel()
			var err error
			if s == rawSide {
				err = rawFanoutBatch(octx, b, t.id, t.subs, batchKeys[j], data)
			} else {
				err = b.client.Publish(octx, t.name, batchReqs[j])
			}
			if err != nil && octx.Err() != nil && ctx.Err() == nil {
				return 0, nil // cut after the window: not counted
			}
			return fanoutBatch, err
		})
		p, err := b.runLoad(ctx, fmt.Sprintf("fanout-%d/%s", n, s), fanoutClients, d, op)
		if err != nil {
			return p, fmt.Errorf("%d subscriptions: %w", n, err)
		}
		if _, err := b.checkFanout(ctx, s, t); err != nil {
			return p, err
		}
		checked[s]++
		return p, nil
	})
	if err != nil {
		return res, err
	}
	// Leave nothing behind: empty tables (no checkpoint: the next window
	// starts with one), then the topics go, and their cleanup jobs find
	// nothing to delete.
	if _, err := b.raw.Exec(ctx, truncateFanout); err != nil {
		return res, fmt.Errorf("truncate: %w", err)
	}
	for _, t := range topics {
		if err := b.deleteTopic(ctx, t.name); err != nil {
			return res, fmt.Errorf("delete topic %s: %w", t.name, err)
		}
	}
	return res, nil
}

func (b *Bench) fanout(ctx context.Context) (*Section, error) {
	perSide, pushFor := b.fanoutTimes()
	if err := warmPool(ctx, b.raw, fanoutClients); err != nil {
		return nil, err
	}
	keys := eventKeys()
	nBatches := keyPool / fanoutBatch
	batchKeys := make([][]string, nBatches)
	batchReqs := make([][]byte, nBatches)
	for i := range batchKeys {
		batchKeys[i] = keys[i*fanoutBatch : (i+1)*fanoutBatch]
		batchReqs[i] = PublishRequest(batchKeys[i])
	}

	var (
		results []fanoutResult
		checked [2]int64 // rounds checked per side
	)
	for i, n := range fanoutSubCounts() {
		progress("  fan-out to %d pull subscriptions, batches of %d, %d clients", n, fanoutBatch, fanoutClients)
		r, err := b.measureFanout(ctx, n, perSide, i%2 == 0, batchKeys, batchReqs, &checked)
		if err != nil {
			var de *densityError
			if errors.As(err, &de) {
				return nil, err
			}
			return nil, fmt.Errorf("fan-out to %d: %w", n, err)
		}
		results = append(results, r)
	}

	// Part 2 starts from a checkpoint, as every window of part 1 does.
	if err := b.checkpoint(ctx); err != nil {
		return nil, err
	}
	progress("  publish → push delivery, %d events/s for %s", pushRate, pushFor)
	p, err := b.measurePush(ctx, pushFor)
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	return fanoutSection(results, checked, p, b.statementsReason, perSide, pushFor), nil
}
