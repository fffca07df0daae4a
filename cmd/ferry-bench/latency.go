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

// wakeResult is what one wake-latency variant measured.
type wakeResult struct {
	wake, send Summary
}

// pause is the producer's random pause before each message: the consumer
// is parked in its long poll by then, and sends are not periodic.
func pause() time.Duration { return 5*time.Millisecond + rand.N(20*time.Millisecond) }

// wakeLoop runs iters rounds of: the consumer announces it is about to
// wait, the producer pauses and sends one message, the consumer's receive
// returns it. It returns send-start → receive-returned latencies and the
// send latencies.
func wakeLoop(ctx context.Context, iters int,
	consume func(ctx context.Context) (ack func() error, err error),
	produce func(ctx context.Context) error,
) (_ wakeResult, err error) {
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
	var wake, send []time.Duration
	for range iters {
		select {
		case <-ready:
		case g := <-received: // an ack failed
			return wakeResult{}, g.err
		case <-ctx.Done():
			return wakeResult{}, ctx.Err()
		}
		sleepUntil(ctx, time.Now().Add(pause()))
		t0 := time.Now()
		if err := produce(ctx); err != nil {
			return wakeResult{}, err
		}
		send = append(send, time.Since(t0))
		var g got
		select {
		case g = <-received:
		case <-ctx.Done():
			return wakeResult{}, ctx.Err()
		}
		if g.err != nil {
			return wakeResult{}, g.err
		}
		wake = append(wake, g.at.Sub(t0))
	}
	return wakeResult{wake: Summarize(wake), send: Summarize(send)}, nil
}

// wakeFerry measures Ferry's long poll: the consumer receives with
// wait_seconds 20 through cons, the producer sends through prod.
func (b *Bench) wakeFerry(ctx context.Context, prod, cons *FerryClient, queue string) (wakeResult, error) {
	req := SendRequest(1)
	return wakeLoop(ctx, b.opts.WakeIters,
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
	return wakeLoop(ctx, b.opts.WakeIters,
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

	const target = 50 * time.Millisecond
	row := func(metric string, r, f time.Duration, withTarget bool) Row {
		row := Row{Metric: metric, Raw: fmtMs(r), Ferry: fmtMs(f), Ratio: fmtRatio(float64(f), float64(r))}
		if withTarget {
			row.Target, row.Pass = "< 50 ms", pass(f < target)
		}
		return row
	}
	return &Section{
		Rows: []Row{
			row("send → receive p50, consumer on the same instance", raw.wake.P50, same.wake.P50, false),
			row("send → receive p99, consumer on the same instance", raw.wake.P99, same.wake.P99, true),
			row("send → receive p50, consumer on a second instance", raw.wake.P50, cross.wake.P50, false),
			row("send → receive p99, consumer on a second instance", raw.wake.P99, cross.wake.P99, true),
			row("send request alone p50 (same instance)", raw.send.P50, same.send.P50, false),
			row("send request alone p99 (same instance)", raw.send.P99, same.send.P99, false),
		},
		How: fmt.Sprintf("%d messages per variant, one at a time. The consumer long-polls an empty queue; after a random pause of 5-25 ms "+
			"the producer sends one message; latency runs from the start of the producer's send request to the moment the consumer's "+
			"receive returns it (one process, monotonic clock); the consumer then acks and waits again. "+
			"Ferry: `receive` with `wait_seconds: 20`, `max_messages: 1`; same instance means producer and consumer talk to one server "+
			"(the sender wakes local waiters right after its commit); second instance means the consumer talks to another Ferry on the same "+
			"database, woken through Ferry's rate-limited NOTIFY (NotifyWindow 10 ms). "+
			"Raw: the consumer `LISTEN`s on its own connection and claims (Ferry's claim statement) whenever a notification arrives; "+
			"the producer `INSERT`s and `pg_notify`s in one autocommit statement. The raw column is the same measurement in every row.",
			b.opts.WakeIters),
	}, nil
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
	sn, ln := depthName(b.opts.SmallDepth), depthName(b.opts.LargeDepth)
	var (
		rsC, rsY, fsC, fsY = Summarize(small.rawClaim), Summarize(small.rawCycle), Summarize(small.ferryClaim), Summarize(small.ferryCycle)
		rlC, rlY, flC, flY = Summarize(large.rawClaim), Summarize(large.rawCycle), Summarize(large.ferryClaim), Summarize(large.ferryCycle)
	)
	var rows []Row
	add := func(metric string, r, f time.Duration) {
		rows = append(rows, Row{Metric: metric, Raw: fmtMs(r), Ferry: fmtMs(f), Ratio: fmtRatio(float64(f), float64(r))})
	}
	add("receive+ack p50 @ "+sn, rsY.P50, fsY.P50)
	add("receive+ack p99 @ "+sn, rsY.P99, fsY.P99)
	add("receive+ack p50 @ "+ln, rlY.P50, flY.P50)
	add("receive+ack p99 @ "+ln, rlY.P99, flY.P99)
	add("claim alone p50 @ "+sn, rsC.P50, fsC.P50)
	add("claim alone p99 @ "+sn, rsC.P99, fsC.P99)
	add("claim alone p50 @ "+ln, rlC.P50, flC.P50)
	add("claim alone p99 @ "+ln, rlC.P99, flC.P99)
	growth := func(metric string, rs, rl, fs, fl time.Duration) {
		g := float64(fl) / float64(fs)
		rows = append(rows, Row{
			Metric: metric + ", " + ln + " ÷ " + sn,
			Raw:    fmtRatio(float64(rl), float64(rs)),
			Ferry:  fmtRatio(float64(fl), float64(fs)),
			Target: "≤ 1.5× (Ferry)",
			Pass:   pass(g <= 1.5),
		})
	}
	growth("receive+ack p50", rsY.P50, rlY.P50, fsY.P50, flY.P50)
	growth("receive+ack p90", rsY.P90, rlY.P90, fsY.P90, flY.P90)
	growth("receive+ack p99", rsY.P99, rlY.P99, fsY.P99, flY.P99)
	rows = append(rows, Row{
		Metric: "shared buffers touched by one claim (EXPLAIN ANALYZE), " + sn + " → " + ln,
		Raw:    fmt.Sprintf("%d → %d", small.rawBuffers, large.rawBuffers),
		Ferry:  "same statement",
	})
	return &Section{
		Rows: rows,
		How: fmt.Sprintf("One client, one queue. The queue is filled to %s, then (after TRUNCATE) to %s waiting messages with `INSERT ... SELECT generate_series`, "+
			"VACUUM ANALYZE and CHECKPOINT. At each depth, %d iterations (after 20 unrecorded) alternate a raw round trip and a Ferry round trip on the same queue, "+
			"swapping which goes first every iteration, so both see the same table. Raw: the claim statement with `LIMIT 1`, then `DELETE` by id. "+
			"Ferry: `POST .../receive` `{\"max_messages\":1}` then `POST .../ack`. \"Claim alone\" is the raw claim statement or Ferry's receive request; "+
			"\"receive+ack\" is the pair. Ratio rows divide the %s figure by the %s one (within a column).",
			fmtInt(int64(b.opts.SmallDepth)), fmtInt(int64(b.opts.LargeDepth)), b.opts.ClaimIters, ln, sn),
	}, nil
}

// depthName renders 10000 as "10k" and 1000000 as "1M".
func depthName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmtInt(int64(n))
}
