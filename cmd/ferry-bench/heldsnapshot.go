package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scenario 15 (opt-in, -only held-snapshot): issue 21's cliff. A queue, a
// subscription and a consumer group are each produced to and consumed
// at a fixed rate from a backlog, twice: once with nothing else on the
// database, once while another session holds a REPEATABLE READ snapshot
// open the whole time (a report query, an idle transaction, pg_dump), so
// that no dead row can be pruned. Each window of the run records the
// consumers' latency and throughput, the backlog, CPU, the table's size
// and its dead tuples; after the run the snapshot ends and the consumers,
// unpaced, drain the backlog back to where it started.

const (
	// heldBatch is the messages of a send or publish and of a receive.
	heldBatch = 10
	// heldGroupBatch is a group poll's max_events.
	heldGroupBatch = 100
	// heldConsumers is the consumers of a queue or a subscription.
	heldConsumers = 8
	// heldDrainCap bounds the drain after a run.
	heldDrainCap = 10 * time.Minute
)

// heldFlows are the flows a run measures, by -held-flows name.
func heldFlows() []heldFlow {
	return []heldFlow{
		{name: "queue", unit: messages, table: "ferry.messages", consumers: heldConsumers, perConsume: heldBatch, setup: (*Bench).heldQueue},
		{name: "subscription", unit: messages, table: "ferry.messages", consumers: heldConsumers, perConsume: heldBatch, setup: (*Bench).heldSubscription},
		{name: "group", unit: events, table: "ferry.events", consumers: 1, perConsume: heldGroupBatch, setup: (*Bench).heldGroup},
	}
}

// heldFlow is one thing consumed at a fixed rate.
type heldFlow struct {
	name  string
	unit  unit
	table string // whose sizes are followed
	// consumers work concurrently, each taking up to perConsume at a time.
	consumers, perConsume int
	// setup creates the flow's resources on emptied tables (named after
	// tag), fills the backlog and returns its operations and the backlog
	// left waiting.
	setup func(b *Bench, ctx context.Context, tag string, backlog int) (heldOps, int64, error)
}

// heldOps are a flow's producer and consumer operations. produce sends
// (publishes) heldBatch; consume receives (polls) and acks (commits)
// what it got, returning how many and how long the receive took.
type heldOps struct {
	produce func(ctx context.Context) error
	consume func(ctx context.Context) (n int, receive time.Duration, err error)
}

// heldSide is one run of a flow, with or without the held snapshot.
type heldSide struct {
	held          bool
	windows       []heldWindow
	before, after RelSizes // of the flow's table
	counts        [2]int64 // ferry.queue_counts' total size before and after
	last          Summary  // receive latency in the last minute
	lastDone      int64    // consumed in the last minute
	lastSpan      time.Duration
	cpu           CPUUsage // the whole run
	startBacklog  int64
	drain         time.Duration
	drained       bool
	xminAge       int64 // of the held snapshot when it ended
}

// heldWindow is one window of a run.
type heldWindow struct {
	end        time.Duration
	lat        Summary
	sent, done int64 // in the window
	backlog    int64 // at its end
	cpu        CPUUsage
	sizes      RelSizes
}

// heldLoad is what a run's producers and consumers share.
type heldLoad struct {
	sent, done atomic.Int64
	unpaced    atomic.Bool
	mu         sync.Mutex
	lat        []heldSample
	fail       func(error)
}

type heldSample struct {
	at time.Time
	d  time.Duration
}

// record notes a consumer's receive.
func (l *heldLoad) record(at time.Time, d time.Duration) {
	l.mu.Lock()
	l.lat = append(l.lat, heldSample{at, d})
	l.mu.Unlock()
}

// between summarises the receives that ended in [from, to).
func (l *heldLoad) between(from, to time.Time) Summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	var d []time.Duration
	for _, s := range l.lat {
		if !s.at.Before(from) && s.at.Before(to) {
			d = append(d, s.d)
		}
	}
	return Summarize(d)
}

// produceAtRate starts a batch every heldBatch/rate seconds from start
// (open loop: a slow send does not delay the next) until ctx ends.
func (l *heldLoad) produceAtRate(ctx context.Context, ops heldOps, rate int, start time.Time, wg *sync.WaitGroup) {
	interval := time.Second * heldBatch / time.Duration(rate)
	for i := 0; ; i++ {
		sleepUntil(ctx, start.Add(time.Duration(i)*interval))
		if ctx.Err() != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ops.produce(ctx); err != nil {
				if ctx.Err() == nil {
					l.fail(fmt.Errorf("produce: %w", err))
				}
				return
			}
			l.sent.Add(heldBatch)
		}()
	}
}

// consumePaced is one consumer: it takes the next slot of a schedule of
// one consume per perConsume/rate seconds shared by all consumers, waits
// for it (unless unpaced) and consumes; behind schedule it runs back to
// back, so consumers keep up whenever they can.
func (l *heldLoad) consumePaced(ctx context.Context, ops heldOps, f heldFlow, rate int, start time.Time, slot *atomic.Int64) {
	interval := time.Second * time.Duration(f.perConsume) / time.Duration(rate)
	for ctx.Err() == nil {
		k := slot.Add(1) - 1
		if !l.unpaced.Load() {
			sleepUntil(ctx, start.Add(time.Duration(k)*interval))
		}
		n, d, err := ops.consume(ctx)
		if err != nil {
			if ctx.Err() == nil {
				l.fail(fmt.Errorf("consume: %w", err))
			}
			return
		}
		l.record(time.Now(), d)
		l.done.Add(int64(n))
		if n == 0 {
			sleepUntil(ctx, time.Now().Add(5*time.Millisecond))
		}
	}
}

// heldRun runs a flow for the scenario's duration, with or without a held
// snapshot, then drains.
func (b *Bench) heldRun(ctx context.Context, f heldFlow, held bool) (heldSide, error) {
	s := heldSide{held: held}
	tag := f.name + "-none"
	if held {
		tag = f.name + "-held"
	}
	ops, backlog, err := f.setup(b, ctx, tag, b.opts.HeldBacklog)
	if err != nil {
		return s, err
	}
	s.startBacklog = backlog
	if s.before, err = b.sizesOf(ctx, f.table); err != nil {
		return s, err
	}
	if s.counts[0], err = b.totalSize(ctx, "ferry.queue_counts"); err != nil {
		return s, err
	}
	release := func() (int64, error) { return 0, nil }
	if held {
		if release, err = b.holdSnapshot(ctx); err != nil {
			return s, err
		}
	}
	defer func() { _, _ = release() }()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		l        heldLoad
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
		slot     atomic.Int64
	)
	l.fail = func(err error) {
		errOnce.Do(func() { firstErr = err })
		cancel()
	}
	start := time.Now()
	labels := pprof.Labels("role", "client", "load", "held/"+tag)
	wg.Add(1 + f.consumers)
	go pprof.Do(ctx, labels, func(ctx context.Context) {
		defer wg.Done()
		l.produceAtRate(ctx, ops, b.opts.HeldRate, start, &wg)
	})
	for range f.consumers {
		go pprof.Do(ctx, labels, func(ctx context.Context) {
			defer wg.Done()
			l.consumePaced(ctx, ops, f, b.opts.HeldRate, start, &slot)
		})
	}
	err = b.heldObserve(ctx, f, &s, &l, start, release)
	cancel()
	wg.Wait()
	if firstErr != nil {
		return s, firstErr
	}
	if err != nil {
		return s, err
	}
	return s, b.heldFinish(context.WithoutCancel(ctx), f, &s)
}

// heldObserve samples every window of the run, then ends the held
// snapshot, lets the consumers run unpaced and times the drain back to
// the starting backlog.
func (b *Bench) heldObserve(ctx context.Context, f heldFlow, s *heldSide, l *heldLoad, start time.Time, release func() (int64, error)) error {
	win := heldWindowOf(b.opts.HeldDuration)
	cpuRun, cpuWin := b.cpu.Sample(), b.cpu.Sample()
	var sent, done int64
	backlog := func() int64 { return s.startBacklog + l.sent.Load() - l.done.Load() }
	for w := time.Duration(1); w*win <= b.opts.HeldDuration; w++ {
		end := start.Add(w * win)
		sleepUntil(ctx, end)
		if ctx.Err() != nil {
			return nil // the load failed; heldRun reports why
		}
		hw := heldWindow{end: w * win, lat: l.between(end.Add(-win), end), cpu: b.cpu.Since(cpuWin)}
		cpuWin = b.cpu.Sample()
		hw.sent, hw.done, hw.backlog = l.sent.Load()-sent, l.done.Load()-done, backlog()
		sent, done = l.sent.Load(), l.done.Load()
		var err error
		if hw.sizes, err = b.sizesOf(ctx, f.table); err != nil {
			return err
		}
		s.windows = append(s.windows, hw)
		progress("  %s %s: p50 %s p99 %s, %s %s, backlog %s, dead %s", heldLabel(s.held), f.name, fmtMs(hw.lat.P50), fmtMs(hw.lat.P99),
			fmtInt(hw.done), heldConsumed(f), fmtInt(hw.backlog), fmtInt(hw.sizes.Dead))
	}
	ended := time.Now()
	s.cpu = b.cpu.Since(cpuRun)
	s.lastSpan = min(time.Minute, ended.Sub(start))
	s.last = l.between(ended.Add(-s.lastSpan), ended)
	for i := len(s.windows) - 1; i >= 0 && s.windows[i].end > ended.Sub(start)-s.lastSpan; i-- {
		s.lastDone += s.windows[i].done
	}
	var err error
	if s.xminAge, err = release(); err != nil {
		return err
	}
	l.unpaced.Store(true)
	for limit := min(heldDrainCap, b.opts.HeldDuration); backlog() > s.startBacklog && time.Since(ended) < limit && ctx.Err() == nil; {
		sleepUntil(ctx, time.Now().Add(250*time.Millisecond))
	}
	s.drain, s.drained = time.Since(ended), backlog() <= s.startBacklog
	return nil
}

// heldFinish reads the sizes after the run.
func (b *Bench) heldFinish(ctx context.Context, f heldFlow, s *heldSide) error {
	var err error
	if s.after, err = b.sizesOf(ctx, f.table); err != nil {
		return err
	}
	s.counts[1], err = b.totalSize(ctx, "ferry.queue_counts")
	return err
}

// heldWindowOf is the length of a run's windows: a minute, shorter in
// runs under six minutes (at least 10 s).
func heldWindowOf(d time.Duration) time.Duration {
	return min(time.Minute, max(10*time.Second, (d/6).Truncate(10*time.Second)))
}

func heldLabel(held bool) string {
	if held {
		return "snapshot held"
	}
	return "no snapshot"
}

// heldConsumed names what a flow's consumers do to what they took.
func heldConsumed(f heldFlow) string {
	if f.unit == events {
		return "committed"
	}
	return "acked"
}

// holdSnapshot opens a session on the bench's database that takes a
// REPEATABLE READ snapshot and keeps it, as a report query or an idle
// transaction would, and checks that it holds the xmin horizon. release
// reads the age of that xmin (transactions) and ends the session.
func (b *Bench) holdSnapshot(ctx context.Context) (release func() (int64, error), err error) {
	conn, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return nil, err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT 1`)
	}
	pid := conn.PgConn().PID()
	var holds bool
	if err == nil {
		err = b.raw.QueryRow(ctx, `SELECT backend_xmin IS NOT NULL FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&holds)
	}
	if err == nil && !holds {
		err = errors.New("the held session has no backend_xmin")
	}
	if err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("hold a snapshot: %w", err)
	}
	var once sync.Once
	return func() (age int64, err error) {
		once.Do(func() {
			err = b.raw.QueryRow(context.WithoutCancel(ctx), `SELECT age(backend_xmin) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&age)
			_ = tx.Rollback(context.WithoutCancel(ctx))
			closeConn(conn)
		})
		return age, err
	}, nil
}

// totalSize is a table's size with its indexes and TOAST.
func (b *Bench) totalSize(ctx context.Context, table string) (n int64, err error) {
	err = b.raw.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint
		FROM `+leavesOf("$1::regclass")+` l`, table).Scan(&n)
	return n, err
}

// heldSnapshot is scenario 15: each flow of -held-flows without, then
// with, the held snapshot.
func (b *Bench) heldSnapshot(ctx context.Context) (*Section, error) {
	var results []heldResult
	for _, f := range heldFlows() {
		if !b.opts.HeldFlows[f.name] {
			continue
		}
		r := heldResult{flow: f}
		var err error
		if r.none, err = b.heldRun(ctx, f, false); err != nil {
			return nil, fmt.Errorf("%s without a held snapshot: %w", f.name, err)
		}
		if r.held, err = b.heldRun(ctx, f, true); err != nil {
			return nil, fmt.Errorf("%s with a held snapshot: %w", f.name, err)
		}
		results = append(results, r)
	}
	return heldSection(results, b.opts.HeldDuration, b.opts.HeldRate, b.opts.HeldBacklog), nil
}

// parseHeldFlows reads -held-flows: flow names, comma-separated.
func parseHeldFlows(s string) (map[string]bool, error) {
	out := map[string]bool{}
	var names []string
	for _, f := range heldFlows() {
		names = append(names, f.name)
	}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(names, n) {
			return nil, fmt.Errorf("-held-flows: %q is not one of %s", n, strings.Join(names, ", "))
		}
		out[n] = true
	}
	return out, nil
}
