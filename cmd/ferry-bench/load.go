package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// errDrained is returned by a consumer operation that found the queue
// empty: the worker stops, and the measurement window ends at the last
// completed operation.
var errDrained = errors.New("queue drained")

// loadOp is one operation of one worker (a request, a transaction); it
// returns the number of messages it moved.
type loadOp func(ctx context.Context, worker int) (int, error)

// Phase is the outcome of one measured load.
type Phase struct {
	Messages int64
	Elapsed  time.Duration
	// Latencies of the operations counted.
	Latencies []time.Duration
	CPU       CPUUsage
	// WALBytes is the WAL written and WriteXacts the transaction ids
	// assigned (write transactions) during the window, by anyone: the
	// database is otherwise idle but for River's occasional bookkeeping.
	WALBytes   int64
	WriteXacts int64
	// Waits is what the database's backends were doing.
	Waits   Waits
	Drained bool
}

// Rate is the messages per second.
func (p Phase) Rate() float64 { return Rate{Count: p.Messages, Elapsed: p.Elapsed}.PerSecond() }

// WALPerMessage is the WAL bytes per message moved.
func (p Phase) WALPerMessage() float64 { return perMessage(p.WALBytes, p.Messages) }

// XactsPerMessage is the write transactions per message moved.
func (p Phase) XactsPerMessage() float64 { return perMessage(p.WriteXacts, p.Messages) }

func perMessage(n, messages int64) float64 {
	if messages == 0 {
		return 0
	}
	return float64(n) / float64(messages)
}

// Merge combines two phases of the same side (CPU weighted by time).
func (p Phase) Merge(q Phase) Phase {
	total := p.Elapsed + q.Elapsed
	w := func(a, b float64) float64 {
		if total <= 0 {
			return 0
		}
		return (a*p.Elapsed.Seconds() + b*q.Elapsed.Seconds()) / total.Seconds()
	}
	return Phase{
		Messages:  p.Messages + q.Messages,
		Elapsed:   total,
		Latencies: append(append([]time.Duration(nil), p.Latencies...), q.Latencies...),
		CPU: CPUUsage{
			Self: w(p.CPU.Self, q.CPU.Self), PG: w(p.CPU.PG, q.CPU.PG), Other: w(p.CPU.Other, q.CPU.Other),
			IRQ: w(p.CPU.IRQ, q.CPU.IRQ), PGKnown: p.CPU.PGKnown || q.CPU.PGKnown,
			// Known when every phase that took time knows it (rounds
			// are merged into an empty Phase first).
			Client:      w(p.CPU.Client, q.CPU.Client),
			ClientKnown: (p.CPU.ClientKnown || p.Elapsed == 0) && (q.CPU.ClientKnown || q.Elapsed == 0) && total > 0,
		},
		WALBytes:   p.WALBytes + q.WALBytes,
		WriteXacts: p.WriteXacts + q.WriteXacts,
		Waits:      p.Waits.Merge(q.Waits),
		Drained:    p.Drained || q.Drained,
	}
}

// warmupFor is the unmeasured lead-in before a window of length d.
func warmupFor(d time.Duration) time.Duration { return min(time.Second, d/5) }

// runLoad runs workers goroutines, each calling op in a loop, for a warmup
// and then a measured window of length d. An operation counts when it
// completes inside the window (operations in flight at its start count,
// those in flight at its end do not, which balances out). label names the
// load in CPU profiles.
func (b *Bench) runLoad(ctx context.Context, label string, workers int, d time.Duration, op loadOp) (Phase, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	from := start.Add(warmupFor(d))
	until := from.Add(d)

	var (
		mu       sync.Mutex
		res      Phase
		lastDone time.Time
		firstErr error
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go pprof.Do(ctx, pprof.Labels("role", "client", "load", label), func(ctx context.Context) {
			defer wg.Done()
			var (
				n    int64
				lat  []time.Duration
				last time.Time
			)
			defer func() {
				mu.Lock()
				res.Messages += n
				res.Latencies = append(res.Latencies, lat...)
				if last.After(lastDone) {
					lastDone = last
				}
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(until) {
					return
				}
				k, err := op(ctx, w)
				t1 := time.Now()
				if errors.Is(err, errDrained) {
					mu.Lock()
					res.Drained = true
					mu.Unlock()
					return
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				if !t1.Before(from) && !t1.After(until) {
					n += int64(k)
					lat = append(lat, t1.Sub(t0))
					last = t1
				}
			}
		})
	}

	sleepUntil(ctx, from)
	win := b.startWindow(ctx)
	sleepUntil(ctx, until)
	var measured Phase
	win.end(ctx, &measured)
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.CPU, res.WALBytes, res.WriteXacts, res.Waits = measured.CPU, measured.WALBytes, measured.WriteXacts, measured.Waits
	res.Elapsed = until.Sub(from)
	if res.Drained {
		if lastDone.Before(from) {
			return res, errors.New("the queue drained before the measurement began: raise -prefill")
		}
		res.Elapsed = lastDone.Sub(from)
	}
	return res, nil
}

// window measures what the machine and the database did between its
// start and its end: CPU, WAL, write transactions and the backends' waits.
type window struct {
	b         *Bench
	cpu0      CPUSample
	db0       dbPos
	stopWaits context.CancelFunc
	waits     chan Waits
	share     *clientShare
}

// startWindow starts a window now.
func (b *Bench) startWindow(ctx context.Context) *window {
	w := &window{b: b, cpu0: b.cpu.Sample(), db0: b.dbPosition(ctx), waits: make(chan Waits, 1), share: startClientShare()}
	wctx, stop := context.WithCancel(ctx)
	w.stopWaits = stop
	go func() { w.waits <- b.sampleWaits(wctx) }()
	return w
}

// end ends the window and records what it measured in p.
func (w *window) end(ctx context.Context, p *Phase) {
	p.CPU = w.b.cpu.Since(w.cpu0)
	frac, ok := w.share.stop()
	p.CPU.Client, p.CPU.ClientKnown = p.CPU.Self*frac, ok
	db1 := w.b.dbPosition(ctx)
	w.stopWaits()
	p.Waits = <-w.waits
	p.WALBytes, p.WriteXacts = db1.wal-w.db0.wal, db1.xid-w.db0.xid
}

func sleepUntil(ctx context.Context, t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// side is one of the two things compared.
type side int

const (
	rawSide side = iota
	ferrySide
)

func (s side) String() string {
	if s == rawSide {
		return "raw"
	}
	return "ferry"
}

// alternate measures both sides for perSide each, split into -rounds
// rounds per side run in the order raw, Ferry, Ferry, raw, raw, Ferry, ...
// so that drift and bursts of other load on a shared machine hit both sides
// alike. prepare runs before every round (typically resetting the tables).
// It returns each side's merged phases and the Ferry/raw rate ratio of each
// pair of rounds, which shows the noise.
func (b *Bench) alternate(ctx context.Context, perSide time.Duration, prepare func(side) error, run func(side, time.Duration) (Phase, error)) (rawRes, ferryRes Phase, pairs []float64, err error) {
	return b.rounds(ctx, perSide, b.opts.Rounds, rawSide, prepare, run)
}

// rounds is alternate with a given number of rounds, the first starting
// with side first.
func (b *Bench) rounds(ctx context.Context, perSide time.Duration, rounds int, first side, prepare func(side) error, run func(side, time.Duration) (Phase, error)) (rawRes, ferryRes Phase, pairs []float64, err error) {
	var res [2]Phase
	for i := range rounds {
		if err := ctx.Err(); err != nil {
			return Phase{}, Phase{}, nil, err
		}
		order := []side{first, 1 - first}
		if i%2 == 1 {
			order = []side{1 - first, first}
		}
		var pair [2]Phase
		for _, s := range order {
			if err := prepare(s); err != nil {
				return Phase{}, Phase{}, nil, err
			}
			p, err := run(s, perSide/time.Duration(rounds))
			if err != nil {
				return Phase{}, Phase{}, nil, fmt.Errorf("%s: %w", s, err)
			}
			pair[s] = p
			res[s] = res[s].Merge(p)
		}
		ratio := pair[ferrySide].Rate() / pair[rawSide].Rate()
		pairs = append(pairs, ratio)
		progress("  round %d/%d: raw %.0f/s, Ferry %.0f/s (%.2f×)", i+1, rounds, pair[rawSide].Rate(), pair[ferrySide].Rate(), ratio)
	}
	return res[rawSide], res[ferrySide], pairs, nil
}

// boundedRun is the outcome of runBounded.
type boundedRun struct {
	// Latencies are those of the operations recorded: every one that
	// completed, then every one cut at the deadline, with the time it had
	// run until then (a lower bound of its latency).
	Latencies []time.Duration
	// Done is the operations recorded that completed, Cut those the
	// deadline cancelled (warm-up operations included: a cut is always
	// shown).
	Done, Cut int64
	// OutOfTime says the deadline came before every operation had run.
	OutOfTime bool
	Elapsed   time.Duration
}

// runBounded runs ops recorded operations of op from workers goroutines,
// each of which first runs warmup operations of its own that are not
// recorded, then takes the next operation whenever its last one ended,
// until all have run or the deadline (zero: none) has passed. At the
// deadline the operations in flight are cancelled and recorded as cut,
// so that a measurement of something that has become very slow ends on
// time and still shows what it measured. The first error stops every
// worker and is returned. label names the load in CPU profiles.
func runBounded(ctx context.Context, label string, workers int, ops int64, warmup int, deadline time.Time,
	op func(ctx context.Context, worker int) error,
) (boundedRun, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	opCtx := runCtx
	if !deadline.IsZero() {
		var stop context.CancelFunc
		opCtx, stop = context.WithDeadline(runCtx, deadline)
		defer stop()
	}
	l := &boundedLoad{op: op, warmup: warmup, runCtx: runCtx, cancel: cancel}
	l.left.Store(ops)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go pprof.Do(opCtx, pprof.Labels("role", "client", "load", label), func(ctx context.Context) {
			defer wg.Done()
			l.work(ctx, w)
		})
	}
	wg.Wait()
	res := l.res
	res.Elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if l.firstErr != nil {
		return res, l.firstErr
	}
	res.Cut = int64(len(l.cut))
	res.Latencies = append(res.Latencies, l.cut...)
	res.OutOfTime = res.Done < ops
	return res, nil
}

// boundedLoad is the state runBounded's workers share.
type boundedLoad struct {
	op     func(ctx context.Context, worker int) error
	warmup int
	left   atomic.Int64 // recorded operations not yet taken
	runCtx context.Context
	cancel context.CancelFunc // stops every worker

	mu       sync.Mutex
	res      boundedRun
	cut      []time.Duration
	firstErr error
}

// work is worker w's loop; ctx ends at the deadline.
func (l *boundedLoad) work(ctx context.Context, w int) {
	var lat []time.Duration
	defer func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.res.Latencies = append(l.res.Latencies, lat...)
		l.res.Done += int64(len(lat))
	}()
	for seen := 0; ; seen++ {
		record := seen >= l.warmup
		if record && l.left.Add(-1) < 0 || ctx.Err() != nil {
			return
		}
		t0 := time.Now()
		err := l.op(ctx, w)
		took := time.Since(t0)
		if err != nil {
			l.stopped(ctx, err, took)
			return
		}
		if record {
			lat = append(lat, took)
		}
	}
}

// stopped records an operation that failed after took: cut by the
// deadline, or the run's error (which stops the other workers).
func (l *boundedLoad) stopped(ctx context.Context, err error, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.runCtx.Err() != nil: // stopped by another worker's error, or the caller
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		l.cut = append(l.cut, took)
	default:
		if l.firstErr == nil {
			l.firstErr = err
		}
		l.cancel()
	}
}

// runCounted runs op from workers goroutines until ops operations have run
// (or the first error, which it returns).
func runCounted(ctx context.Context, label string, workers int, ops int64, op func(ctx context.Context) error) error {
	_, err := runBounded(ctx, label, workers, ops, 0, time.Time{}, func(ctx context.Context, _ int) error { return op(ctx) })
	return err
}
