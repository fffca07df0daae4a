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

	rate := func(r churnResult) string {
		return fmt.Sprintf("%s in / %s out", fmtRate(float64(r.in)/r.elapsed.Seconds()), fmtRate(float64(r.out)/r.elapsed.Seconds()))
	}
	trio := func(a, b, c int64) string { return fmtBytes(a) + " → " + fmtBytes(b) + " → " + fmtBytes(c) }
	perK := func(r churnResult) float64 {
		if r.out == 0 {
			return 0
		}
		return float64(r.after.Total-r.before.Total) / float64(r.out) * 1000
	}
	// Ferry passes when it grows at most 1.5 times as much per message as
	// raw SQL does under the same pattern (or does not grow at all).
	ok := perK(ferry) <= 0 || perK(raw) > 0 && perK(ferry)/perK(raw) <= 1.5
	growthRow := Row{
		Metric: "growth per 1,000 messages consumed (total)",
		Raw:    fmtBytes(int64(perK(raw))),
		Ferry:  fmtBytes(int64(perK(ferry))),
		Ratio:  ratioOf(perK(ferry), perK(raw)),
		Target: "≤ 1.5×",
		Pass:   pass(ok),
	}
	percent := func(p float64) string {
		if p < 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.0f%%", p)
	}
	autovacuums := func(r churnResult) string {
		return fmt.Sprintf("%d (+%d)", r.autovacuumRuns, r.autovacuumLate)
	}
	dead := func(n int64) string {
		if n < 0 {
			return "n/a"
		}
		return fmtInt(n)
	}
	rows := []Row{
		{Metric: "rates (steady depth)", Raw: rate(raw), Ferry: rate(ferry), Ratio: ratioOf(float64(ferry.out)/ferry.elapsed.Seconds(), float64(raw.out)/raw.elapsed.Seconds())},
		{Metric: "messages consumed", Raw: fmtInt(raw.out), Ferry: fmtInt(ferry.out)},
		{Metric: "queue depth before → at end", Raw: fmtInt(int64(b.opts.ChurnDepth)) + " → " + fmtInt(raw.depthAtEnd), Ferry: fmtInt(int64(b.opts.ChurnDepth)) + " → " + fmtInt(ferry.depthAtEnd)},
		{Metric: "total size: before → right after → after VACUUM", Raw: trio(raw.before.Total, raw.after.Total, raw.vacuumed.Total), Ferry: trio(ferry.before.Total, ferry.after.Total, ferry.vacuumed.Total)},
		{Metric: "heap: before → right after → after VACUUM", Raw: trio(raw.before.Heap, raw.after.Heap, raw.vacuumed.Heap), Ferry: trio(ferry.before.Heap, ferry.after.Heap, ferry.vacuumed.Heap)},
		{Metric: "indexes: before → right after → after VACUUM", Raw: trio(raw.before.IndexBytes(), raw.after.IndexBytes(), raw.vacuumed.IndexBytes()), Ferry: trio(ferry.before.IndexBytes(), ferry.after.IndexBytes(), ferry.vacuumed.IndexBytes())},
		growthRow,
		{Metric: "dead tuples right after (pgstattuple, exact)", Raw: dead(raw.deadExact), Ferry: dead(ferry.deadExact)},
		{Metric: "heap free for reuse after VACUUM (pgstattuple)", Raw: percent(raw.freeVacuumed), Ferry: percent(ferry.freeVacuumed)},
		{Metric: fmt.Sprintf("n_dead_tup (pg_stat_user_tables, %s after)", statsSettle), Raw: fmtInt(raw.deadStats), Ferry: fmtInt(ferry.deadStats)},
		{Metric: "autovacuum runs: during the run (+ after it, before n_dead_tup was read)", Raw: autovacuums(raw), Ferry: autovacuums(ferry)},
	}

	idx := Grid{Caption: "Per index (before → right after → after VACUUM):", Header: []string{"index", "raw SQL", "Ferry"}}
	for i, ix := range raw.before.Indexes {
		get := func(r RelSizes) int64 {
			if i < len(r.Indexes) {
				return r.Indexes[i].Bytes
			}
			return 0
		}
		idx.Rows = append(idx.Rows, []string{ix.Name, trio(ix.Bytes, get(raw.after), get(raw.vacuumed)),
			trio(get(ferry.before), get(ferry.after), get(ferry.vacuumed))})
	}
	series := Grid{Caption: fmt.Sprintf("Sizes during the run, every %s (heap + indexes, and messages in/out so far):", sampleEvery),
		Header: []string{"t", "raw heap", "raw indexes", "raw in/out", "Ferry heap", "Ferry indexes", "Ferry in/out"}}
	for i := range max(len(raw.series), len(ferry.series)) {
		cell := func(s []churnSample) []string {
			if i >= len(s) {
				return []string{"", "", ""}
			}
			return []string{fmtBytes(s[i].heap), fmtBytes(s[i].index), fmtInt(s[i].in) + " / " + fmtInt(s[i].out)}
		}
		row := []string{fmt.Sprintf("%ds", (i+1)*int(sampleEvery/time.Second))}
		row = append(append(row, cell(raw.series)...), cell(ferry.series)...)
		series.Rows = append(series.Rows, row)
	}
	return &Section{
		Rows:  rows,
		Grids: []Grid{idx, series},
		Notes: []string{"Caveat: autovacuum_naptime is 1 minute, longer than a default run, so whether autovacuum gets to the table " +
			"inside a run is largely luck, and the dead-tuple counts mostly say whether it did. Each consumed message leaves about two dead " +
			"tuples (the claim's UPDATE of the indexed visible_at cannot be HOT; the DELETE kills the new version). A run this short shows " +
			"the growth rate, not the bound: run with `-only 6 -churn 5m` to see whether sizes level off."},
		How: fmt.Sprintf("Each side on its own queue, prefilled to %s messages (then VACUUM ANALYZE, CHECKPOINT), runs for %s with %d producers "+
			"(batches of %d: raw one `INSERT ... unnest` per batch, Ferry one `POST .../messages`) and %d consumers (claim %d + delete: raw the claim "+
			"statement and `DELETE`, Ferry `receive` + `ack`). Consumers only take what producers added and producers only add what consumers took "+
			"(within %d messages), so the depth stays at the prefill and in and out rates are equal; whichever role is slower sets them. Sizes are `pg_relation_size` / `pg_total_relation_size` of ferry.messages and its "+
			"indexes: before, right after the run, and after a manual `VACUUM` (which marks space reusable but rarely shrinks files). Autovacuum runs "+
			"with PostgreSQL's defaults. Growth is compared per message consumed because the two sides move different numbers of messages.",
			fmtInt(int64(b.opts.ChurnDepth)), b.opts.Churn, churnProducers, churnBatch, churnConsumers, churnBatch, churnSlack),
	}, nil
}
