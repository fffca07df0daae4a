package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scenarios 4 and 5: how fast a waiting consumer sees a new message, and
// whether a claim gets slower with a deeper backlog.

// rawSendNotify inserts one message and notifies the raw consumer, in one
// autocommit statement (the notification is delivered at commit).
const rawSendNotify = `
	WITH m AS (
		INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, grp, dedup_id, attributes, body)
		VALUES ($1, nextval('ferry.message_id_seq'), now(), false, NULL, NULL, NULL, $2::json)
		RETURNING queue_id
	)
	SELECT pg_notify('ferry_bench_wake', queue_id::text) FROM m`

// wakeResult is what one wake-latency variant measured: send start →
// receive returned, the send alone, and send answered → receive returned.
type wakeResult struct {
	wake, send, after Summary
}

// wakeSamples are a wake-latency run's measurements, as wakeResult
// summarises them.
type wakeSamples struct {
	wake, send, after []time.Duration
}

func (s wakeSamples) result() wakeResult {
	return wakeResult{wake: Summarize(s.wake), send: Summarize(s.send), after: Summarize(s.after)}
}

// add appends o's measurements.
func (s *wakeSamples) add(o wakeSamples) {
	s.wake, s.send, s.after = append(s.wake, o.wake...), append(s.send, o.send...), append(s.after, o.after...)
}

// pause is the producer's random pause before each message: the consumer
// is parked in its long poll by then, and sends are not periodic.
func pause() time.Duration { return 5*time.Millisecond + rand.N(20*time.Millisecond) }

// wakeLoop runs iters rounds of: the consumer announces it is about to
// wait, the producer pauses and sends one message, the consumer's receive
// returns it. It returns what it measured.
func wakeLoop(ctx context.Context, iters int,
	consume func(ctx context.Context) (ack func() error, err error),
	produce func(ctx context.Context) error,
) (_ wakeSamples, err error) {
	ctx, cancel := context.WithCancel(ctx)
	type got struct {
		at  time.Time
		err error
	}
	ready, received := make(chan struct{}), make(chan got)
	done := make(chan struct{})
	defer func() {
		// On success let the consumer finish its last ack; on failure
		// stop it first.
		if err != nil {
			cancel()
		}
		<-done
		cancel()
	}()
	go func() {
		defer close(done)
		for range iters {
			select {
			case ready <- struct{}{}:
			case <-ctx.Done():
				return
			}
			ack, err := consume(ctx)
			at := time.Now()
			select {
			case received <- got{at, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
			if err := ack(); err != nil {
				select {
				case received <- got{err: err}:
				case <-ctx.Done():
				}
				return
			}
		}
	}()
	var out wakeSamples
	for range iters {
		select {
		case <-ready:
		case g := <-received: // an ack failed
			return wakeSamples{}, g.err
		case <-ctx.Done():
			return wakeSamples{}, ctx.Err()
		}
		sleepUntil(ctx, time.Now().Add(pause()))
		t0 := time.Now()
		if err := produce(ctx); err != nil {
			return wakeSamples{}, err
		}
		t1 := time.Now()
		var g got
		select {
		case g = <-received:
		case <-ctx.Done():
			return wakeSamples{}, ctx.Err()
		}
		if g.err != nil {
			return wakeSamples{}, g.err
		}
		out.wake, out.send, out.after = append(out.wake, g.at.Sub(t0)), append(out.send, t1.Sub(t0)), append(out.after, g.at.Sub(t1))
	}
	return out, nil
}

// wakeFerry measures Ferry's long poll: the consumer receives with
// wait_seconds 20 through cons, the producer sends through prod.
func (b *Bench) wakeFerry(ctx context.Context, prod, cons *FerryClient, queue string) (wakeResult, error) {
	req := SendRequest(1)
	s, err := wakeLoop(ctx, b.opts.WakeIters,
		func(ctx context.Context) (func() error, error) {
			receipts, err := cons.Receive(ctx, queue, 1, 20)
			if err != nil {
				return nil, err
			}
			if len(receipts) != 1 {
				return nil, fmt.Errorf("long poll returned %d messages, want 1", len(receipts))
			}
			return func() error { return cons.Ack(ctx, queue, receipts) }, nil
		},
		func(ctx context.Context) error { return prod.Send(ctx, queue, req) })
	return s.result(), err
}

// wakeRaw measures the same with raw SQL: the consumer LISTENs on its own
// connection, claims, and waits for a notification whenever the claim
// finds nothing; the producer inserts and notifies in one statement.
func (b *Bench) wakeRaw(ctx context.Context, queueID int64) (wakeResult, error) {
	conn, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return wakeResult{}, err
	}
	defer closeConn(conn)
	if _, err := conn.Exec(ctx, `LISTEN ferry_bench_wake`); err != nil {
		return wakeResult{}, err
	}
	s, err := wakeLoop(ctx, b.opts.WakeIters,
		func(ctx context.Context) (func() error, error) {
			for {
				ids, err := rawClaimIDs(ctx, conn, queueID, 1)
				if err != nil {
					return nil, err
				}
				if len(ids) > 0 {
					return func() error {
						_, err := conn.Exec(ctx, rawDelete, queueID, ids)
						return err
					}, nil
				}
				wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				_, err = conn.WaitForNotification(wctx)
				cancel()
				if err != nil {
					return nil, fmt.Errorf("waiting for a notification: %w", err)
				}
			}
		},
		func(ctx context.Context) error {
			_, err := b.raw.Exec(ctx, rawSendNotify, queueID, body)
			return err
		})
	return s.result(), err
}

func (b *Bench) wakeLatency(ctx context.Context) (*Section, error) {
	if err := b.reset(ctx); err != nil {
		return nil, err
	}
	rawID, err := b.createQueue(ctx, "bench-wake-raw")
	if err != nil {
		return nil, err
	}
	for _, q := range []string{"bench-wake-ferry", "bench-wake-cross"} {
		if _, err := b.createQueue(ctx, q); err != nil {
			return nil, err
		}
	}
	raw, err := b.wakeRaw(ctx, rawID)
	if err != nil {
		return nil, fmt.Errorf("raw: %w", err)
	}
	progress("  raw LISTEN/NOTIFY: p50 %s p99 %s", fmtMs(raw.wake.P50), fmtMs(raw.wake.P99))
	same, err := b.wakeFerry(ctx, b.client, b.client, "bench-wake-ferry")
	if err != nil {
		return nil, fmt.Errorf("ferry: %w", err)
	}
	progress("  Ferry, one instance: p50 %s p99 %s", fmtMs(same.wake.P50), fmtMs(same.wake.P99))
	second, err := b.secondServer(ctx)
	if err != nil {
		return nil, fmt.Errorf("second Ferry instance: %w", err)
	}
	cross, err := b.wakeFerry(ctx, b.client, b.client.At(second.URL()), "bench-wake-cross")
	if err != nil {
		return nil, fmt.Errorf("ferry across instances: %w", err)
	}
	progress("  Ferry, two instances: p50 %s p99 %s", fmtMs(cross.wake.P50), fmtMs(cross.wake.P99))

	return wakeSection(raw, same, cross, b.opts.WakeIters), nil
}

// claimSamples are the latencies of one depth of scenario 5.
type claimSamples struct {
	rawClaim, rawCycle, ferryClaim, ferryCycle []time.Duration
	rawBuffers                                 int64
}

// claimAt fills the queue to depth and measures single-client claim
// latency, alternating raw and Ferry round trips on the same queue so both
// see the same table.
func (b *Bench) claimAt(ctx context.Context, queue string, queueID int64, depth int) (claimSamples, error) {
	var s claimSamples
	if err := b.reset(ctx); err != nil {
		return s, err
	}
	if err := b.fill(ctx, queueID, depth); err != nil {
		return s, err
	}
	rawOnce := func(record bool) error {
		t0 := time.Now()
		ids, err := rawClaimIDs(ctx, b.raw, queueID, 1)
		if err != nil {
			return err
		}
		t1 := time.Now()
		if len(ids) != 1 {
			return errors.New("raw claim found nothing")
		}
		if _, err := b.raw.Exec(ctx, rawDelete, queueID, ids); err != nil {
			return err
		}
		if record {
			s.rawClaim = append(s.rawClaim, t1.Sub(t0))
			s.rawCycle = append(s.rawCycle, time.Since(t0))
		}
		return nil
	}
	ferryOnce := func(record bool) error {
		t0 := time.Now()
		receipts, err := b.client.Receive(ctx, queue, 1, 0)
		if err != nil {
			return err
		}
		t1 := time.Now()
		if len(receipts) != 1 {
			return errors.New("ferry receive found nothing")
		}
		if err := b.client.Ack(ctx, queue, receipts); err != nil {
			return err
		}
		if record {
			s.ferryClaim = append(s.ferryClaim, t1.Sub(t0))
			s.ferryCycle = append(s.ferryCycle, time.Since(t0))
		}
		return nil
	}
	const warmup = 20
	for i := range warmup + b.opts.ClaimIters {
		record := i >= warmup
		first, second := rawOnce, ferryOnce
		if i%2 == 1 {
			first, second = ferryOnce, rawOnce
		}
		if err := first(record); err != nil {
			return s, err
		}
		if err := second(record); err != nil {
			return s, err
		}
	}
	var err error
	s.rawBuffers, err = b.claimBuffers(ctx, queueID)
	return s, err
}

// claimBuffers runs EXPLAIN (ANALYZE, BUFFERS) of one raw claim in a
// transaction that is rolled back, and returns the shared buffers the
// statement touched (hit + read).
func (b *Bench) claimBuffers(ctx context.Context, queueID int64) (int64, error) {
	tx, err := b.raw.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var out []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+rawClaim, queueID, 1, leaseMillis).Scan(&out); err != nil {
		return 0, err
	}
	var plan []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plan); err != nil {
		return 0, fmt.Errorf("EXPLAIN output: %w", err)
	}
	if len(plan) == 0 {
		return 0, errors.New("EXPLAIN output: no plan")
	}
	return plan[0].Plan.Hit + plan[0].Plan.Read, nil
}

func (b *Bench) claimLatency(ctx context.Context) (*Section, error) {
	const queue = "bench-claim"
	queueID, err := b.createQueue(ctx, queue)
	if err != nil {
		return nil, err
	}
	if err := warmPool(ctx, b.raw, 1); err != nil {
		return nil, err
	}
	small, err := b.claimAt(ctx, queue, queueID, b.opts.SmallDepth)
	if err != nil {
		return nil, err
	}
	large, err := b.claimAt(ctx, queue, queueID, b.opts.LargeDepth)
	if err != nil {
		return nil, err
	}
	return claimSection(small, large, b.opts.SmallDepth, b.opts.LargeDepth, b.opts.ClaimIters), nil
}
