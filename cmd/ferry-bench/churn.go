package main

import (
	"context"
	"fmt"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario 6: table and index size while messages flow in and out of a
// queue that stays at a steady depth.

const (
	churnProducers = 4
	churnConsumers = 4
	churnBatch     = 10
	// churnSlack is how far above the target depth producers may run.
	churnSlack = 2 * churnProducers * churnBatch
	// sampleEvery is the period of the size time series.
	sampleEvery = 5 * time.Second
	// statsSettle is how long an idle backend may keep its statistics
	// before reporting them (PGSTAT_IDLE_INTERVAL is 10 s).
	statsSettle = 11 * time.Second
)

// churnResult is one side's run.
type churnResult struct {
	in, out        int64
	elapsed        time.Duration
	before, after  RelSizes
	vacuumed       RelSizes
	deadExact      int64   // from pgstattuple, -1 when unavailable
	freeVacuumed   float64 // free space after VACUUM, % of the heap (pgstattuple), -1 when unavailable
	deadStats      int64   // n_dead_tup after the statistics settled
	series         []churnSample
	depthAtEnd     int64
	autovacuumRuns int64 // during the run
	autovacuumLate int64 // after the run, before n_dead_tup was read
}

type churnSample struct {
	at          time.Duration
	in, out     int64
	heap, index int64
}

// churnOps are one side's producer and consumer operations; consume
// returns how many messages it took (0 = none visible).
type churnOps struct {
	produce func(ctx context.Context) error
	consume func(ctx context.Context) (int, error)
}

func (b *Bench) churnRun(ctx context.Context, queueID int64, ops churnOps, label string) (churnResult, error) {
	var r churnResult
	if err := b.reset(ctx); err != nil {
		return r, err
	}
	if err := b.fill(ctx, queueID, b.opts.ChurnDepth); err != nil {
		return r, err
	}
	var err error
	if r.before, err = b.sizes(ctx); err != nil {
		return r, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		in, out  atomic.Int64
		depth    atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	depth.Store(int64(b.opts.ChurnDepth))
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		cancel()
	}
	start := time.Now()
	until := start.Add(b.opts.Churn)
	labels := pprof.Labels("role", "client", "load", "churn/"+label)
	for range churnProducers {
		wg.Add(1)
		go pprof.Do(ctx, labels, func(ctx context.Context) {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(until) {
				// Keep the depth steady: produce only what consumers took.
				if depth.Load() >= int64(b.opts.ChurnDepth)+churnSlack {
					sleepUntil(ctx, time.Now().Add(time.Millisecond))
					continue
				}
				if err := ops.produce(ctx); err != nil {
					fail(fmt.Errorf("produce: %w", err))
					return
				}
				in.Add(churnBatch)
				depth.Add(churnBatch)
			}
		})
	}
	for range churnConsumers {
		wg.Add(1)
		go pprof.Do(ctx, labels, func(ctx context.Context) {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(until) {
				// Keep the depth steady: consume only what producers added.
				if depth.Load() < int64(b.opts.ChurnDepth) {
					sleepUntil(ctx, time.Now().Add(time.Millisecond))
					continue
				}
				n, err := ops.consume(ctx)
				if err != nil {
					fail(fmt.Errorf("consume: %w", err))
					return
				}
				out.Add(int64(n))
				depth.Add(-int64(n))
			}
		})
	}
	for next := start.Add(sampleEvery); next.Before(until.Add(time.Millisecond)); next = next.Add(sampleEvery) {
		sleepUntil(ctx, next)
		if ctx.Err() != nil {
			break
		}
		sz, err := b.sizes(ctx)
		if err != nil {
			fail(err)
			break
		}
		r.series = append(r.series, churnSample{at: time.Since(start), in: in.Load(), out: out.Load(), heap: sz.Heap, index: sz.IndexBytes()})
	}
	wg.Wait()
	if firstErr != nil {
		return r, firstErr
	}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	stopped := time.Now()
	r.elapsed = stopped.Sub(start)
	r.in, r.out = in.Load(), out.Load()
	if r.after, err = b.sizes(ctx); err != nil {
		return r, err
	}
	r.autovacuumRuns = r.after.Autovacuums - r.before.Autovacuums
	r.deadExact, _ = b.tupleStats(ctx)
	if err := b.raw.QueryRow(ctx, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, queueID).Scan(&r.depthAtEnd); err != nil {
		return r, err
	}
	// n_dead_tup comes from the cumulative statistics, which idle backends
	// report up to 10 s late.
	sleepUntil(ctx, stopped.Add(statsSettle))
	settled, err := b.sizes(ctx)
	if err != nil {
		return r, err
	}
	r.deadStats = settled.Dead
	r.autovacuumLate = settled.Autovacuums - r.after.Autovacuums
	if _, err := b.raw.Exec(ctx, `VACUUM ferry.messages`); err != nil {
		return r, err
	}
	if r.vacuumed, err = b.sizes(ctx); err != nil {
		return r, err
	}
	_, r.freeVacuumed = b.tupleStats(ctx)
	progress("  %s: in %.0f/s out %.0f/s, total %s → %s → %s after VACUUM", label,
		float64(r.in)/r.elapsed.Seconds(), float64(r.out)/r.elapsed.Seconds(),
		fmtBytes(r.before.Total), fmtBytes(r.after.Total), fmtBytes(r.vacuumed.Total))
	return r, nil
}

// tupleStats reads the exact dead tuple count and free space (percent of
// the heap) of ferry.messages with pgstattuple, or -1s when the extension
// is not available.
func (b *Bench) tupleStats(ctx context.Context) (dead int64, freePercent float64) {
	if _, err := b.raw.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pgstattuple`); err != nil {
		return -1, -1
	}
	if err := b.raw.QueryRow(ctx, `SELECT dead_tuple_count, free_percent FROM pgstattuple('ferry.messages')`).Scan(&dead, &freePercent); err != nil {
		return -1, -1
	}
	return dead, freePercent
}

func (b *Bench) churn(ctx context.Context) (*Section, error) {
	rawID, err := b.createQueue(ctx, "bench-churn-raw")
	if err != nil {
		return nil, err
	}
	const ferryQ = "bench-churn-ferry"
	ferryID, err := b.createQueue(ctx, ferryQ)
	if err != nil {
		return nil, err
	}
	arr, req := bodies(churnBatch), SendRequest(churnBatch)
	raw, err := b.churnRun(ctx, rawID, churnOps{
		produce: func(ctx context.Context) error {
			_, err := b.raw.Exec(ctx, rawInsertBatch, rawID, arr)
			return err
		},
		consume: func(ctx context.Context) (int, error) {
			ids, err := rawClaimIDs(ctx, b.raw, rawID, churnBatch)
			if err != nil || len(ids) == 0 {
				return 0, err
			}
			_, err = b.raw.Exec(ctx, rawDelete, rawID, ids)
			return len(ids), err
		},
	}, "raw")
	if err != nil {
		return nil, fmt.Errorf("raw: %w", err)
	}
	ferry, err := b.churnRun(ctx, ferryID, churnOps{
		produce: func(ctx context.Context) error { return b.client.Send(ctx, ferryQ, req) },
		consume: func(ctx context.Context) (int, error) {
			receipts, err := b.client.Receive(ctx, ferryQ, churnBatch, 0)
			if err != nil || len(receipts) == 0 {
				return 0, err
			}
			return len(receipts), b.client.Ack(ctx, ferryQ, receipts)
		},
	}, "ferry")
	if err != nil {
		return nil, fmt.Errorf("ferry: %w", err)
	}

	return churnSection(raw, ferry, b.opts.ChurnDepth, b.opts.Churn), nil
}
