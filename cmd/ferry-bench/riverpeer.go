package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// Scenario 16: River, the job queue a Go team on PostgreSQL would pick
// instead of Ferry (issue 22, must-have 4), side by side with Ferry in the
// same run and database. River takes the slot the other scenarios give raw
// SQL (rawSide: left column, first in the alternation, "raw" in progress
// lines and CPU profile labels). River's tables are the ones Ferry's boot
// migrated, and Ferry's own River client works them too: the bench's jobs
// go to a queue of their own (riverQueue), which Ferry's client does not
// work, and the bench's client works no other; between rounds only that
// queue's rows are deleted, never the table truncated.

const (
	// riverQueue is the bench's River queue.
	riverQueue = "bench_peer"
	// riverKind is the bench's job kind.
	riverKind = "ferry_bench_noop"
	// peerQueue is Ferry's queue in this scenario.
	peerQueue = "bench-peer"
	// peerBatch and peerClients: the insert part's batch and concurrency.
	peerBatch, peerClients = 500, 8
	// riverMaxWorkers is the bench queue's MaxWorkers (River's README's).
	riverMaxWorkers = 100
	// peerTick and peerPerTick: the latency part's schedule, 1,000/s.
	peerTick, peerPerTick = 10 * time.Millisecond, 10
	// peerTunedCooldown is the FetchCooldown of the tuned River run.
	peerTunedCooldown = time.Millisecond
)

// riverArgs is the bench's job: the bench body as payload (so that a job
// carries what a Ferry message does) and, in the latency part, when its
// insert started.
type riverArgs struct {
	Payload json.RawMessage `json:"payload"`
	SentNs  int64           `json:"sent_ns,omitempty"`
}

// Kind is River's name of the job kind.
func (riverArgs) Kind() string { return riverKind }

// riverWorker works the bench's jobs by doing nothing; with seen set, it
// first reports the job's insert start and the time it was handed over.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	seen func(sentNs int64, at time.Time)
}

// Work is the no-op.
func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	if w.seen != nil {
		w.seen(job.Args.SentNs, time.Now())
	}
	return nil
}

// riverClient is a River client on the bench's raw pool. Without a
// worker it only inserts; with one it works riverQueue with
// riverMaxWorkers workers. cooldown 0 keeps River's FetchCooldown
// (100 ms). It never runs for leader (LeaderElectionDisabled): Ferry's
// client keeps leading, so its periodic jobs and maintenance go on as
// without the bench, and the bench's client runs no maintenance.
func (b *Bench) riverClient(w *riverWorker, cooldown time.Duration) (*river.Client[pgx.Tx], error) {
	cfg := &river.Config{Logger: b.log.With("component", "bench-river"), LeaderElectionDisabled: true, FetchCooldown: cooldown}
	if w != nil {
		workers := river.NewWorkers()
		river.AddWorker(workers, w)
		cfg.Workers = workers
		cfg.Queues = map[string]river.QueueConfig{riverQueue: {MaxWorkers: riverMaxWorkers}}
	}
	return river.NewClient(riverpgxv5.New(b.raw), cfg)
}

// riverParams are n jobs for riverQueue, each with the bench body.
func riverParams(n int, sentNs int64) []river.InsertManyParams {
	p := make([]river.InsertManyParams, n)
	for i := range p {
		p[i] = river.InsertManyParams{Args: riverArgs{Payload: json.RawMessage(body), SentNs: sentNs}, InsertOpts: &river.InsertOpts{Queue: riverQueue}}
	}
	return p
}

// riverReset deletes the bench queue's jobs (only those: Ferry's are in
// the same table), vacuums the table and checkpoints.
func (b *Bench) riverReset(ctx context.Context) error {
	if _, err := b.raw.Exec(ctx, `DELETE FROM river_job WHERE queue = $1`, riverQueue); err != nil {
		return fmt.Errorf("delete the bench's River jobs: %w", err)
	}
	if _, err := b.raw.Exec(ctx, `VACUUM ANALYZE river_job`); err != nil {
		return fmt.Errorf("vacuum river_job: %w", err)
	}
	return b.checkpoint(ctx)
}

// peerReset empties both sides: the bench's River jobs and Ferry's
// messages.
func (b *Bench) peerReset(ctx context.Context) error {
	if err := b.riverReset(ctx); err != nil {
		return err
	}
	return b.reset(ctx)
}

// stopRiver stops a started client, waiting up to 30 s for its jobs.
func stopRiver(c *river.Client[pgx.Tx]) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		progress("  stopping the bench's River client: %v", err)
	}
}

// riverPeer is scenario 16.
func (b *Bench) riverPeer(ctx context.Context) (*Section, error) {
	queueID, err := b.createQueue(ctx, peerQueue)
	if err != nil {
		return nil, err
	}
	var r peerResult
	if r.insert, err = b.peerInsert(ctx); err != nil {
		return nil, fmt.Errorf("insert: %w", err)
	}
	r.backlog = 100_000
	if b.opts.Quick {
		r.backlog = 20_000
	}
	progress("  work: a backlog of %s per side", fmtInt(int64(r.backlog)))
	if r.work, err = b.peerWork(ctx, queueID, r.backlog); err != nil {
		return nil, fmt.Errorf("work: %w", err)
	}
	r.latencyFor = b.opts.Duration
	progress("  latency: %d/s for %s per side", peerPerTick*int(time.Second/peerTick), r.latencyFor)
	for i, run := range []struct {
		what string
		out  *peerLatency
		run  func() (peerLatency, error)
	}{
		{"River", &r.latency[0], func() (peerLatency, error) { return b.riverLatency(ctx, r.latencyFor, 0) }},
		{"Ferry", &r.latency[1], func() (peerLatency, error) { return b.ferryLatency(ctx, r.latencyFor) }},
		{"River, FetchCooldown " + peerTunedCooldown.String(), &r.tuned, func() (peerLatency, error) {
			return b.riverLatency(ctx, r.latencyFor, peerTunedCooldown)
		}},
	} {
		if err := b.peerReset(ctx); err != nil {
			return nil, err
		}
		if *run.out, err = run.run(); err != nil {
			return nil, fmt.Errorf("%s latency: %w", run.what, err)
		}
		l := *run.out
		progress("  latency %d/3, %s: completion p50 %s p99 %s, %d of %d completed", i+1, run.what, fmtMs(l.doneAt.P50), fmtMs(l.doneAt.P99), l.done, l.sent)
	}
	return riverPeerSection(r, riverPeerHow(r, b.roundsNote)), b.peerReset(ctx)
}

// peerResult is what scenario 16 measured.
type peerResult struct {
	insert     sidesResult
	work       sidesResult
	backlog    int
	latencyFor time.Duration
	// latency is River's (default settings) and Ferry's; tuned is River's
	// with FetchCooldown peerTunedCooldown.
	latency [2]peerLatency
	tuned   peerLatency
}

// sidesResult is a comparison's merged phases and per-pair ratios.
type sidesResult struct {
	river, ferry Phase
	pairs        []float64
	// tuned is River's with FetchCooldown peerTunedCooldown (work only).
	tuned Phase
}

// peerInsert is the insert part: 8 clients inserting batches of 500 in
// alternating rounds, River's InsertMany against Ferry's batch send.
func (b *Bench) peerInsert(ctx context.Context) (sidesResult, error) {
	c, err := b.riverClient(nil, 0)
	if err != nil {
		return sidesResult{}, err
	}
	params, req := riverParams(peerBatch, 0), SendRequest(peerBatch)
	var r sidesResult
	r.river, r.ferry, r.pairs, err = b.compare(ctx, sideLoads{label: "river-peer-insert", clients: peerClients,
		prepare: func(side) error { return b.peerReset(ctx) },
		ops: [2]loadOp{
			func(ctx context.Context, _ int) (int, error) {
				res, err := c.InsertMany(ctx, params)
				return len(res), err
			},
			func(ctx context.Context, _ int) (int, error) { return peerBatch, b.client.Send(ctx, peerQueue, req) },
		}})
	return r, err
}

// peerWork is the work part: a backlog of n drained as fast as possible
// by each side, in min(-rounds, 2) rounds per side, alternating.
func (b *Bench) peerWork(ctx context.Context, queueID int64, n int) (sidesResult, error) {
	var r sidesResult
	var err error
	r.river, r.ferry, r.pairs, err = b.rounds(ctx, 0, min(b.opts.Rounds, 2), rawSide,
		func(s side) error {
			if err := b.peerReset(ctx); err != nil {
				return err
			}
			if s == rawSide {
				return b.riverFill(ctx, n)
			}
			return b.fill(ctx, queueID, n)
		},
		func(s side, _ time.Duration) (Phase, error) {
			if s == rawSide {
				return b.riverDrain(ctx, n, 0)
			}
			return b.ferryDrain(ctx, n)
		})
	if err != nil {
		return r, err
	}
	// At its defaults a River producer fetches at most MaxWorkers jobs per
	// FetchCooldown: once more, River alone, with the lower cooldown.
	if err := b.peerReset(ctx); err != nil {
		return r, err
	}
	if err := b.riverFill(ctx, n); err != nil {
		return r, err
	}
	r.tuned, err = b.riverDrain(ctx, n, peerTunedCooldown)
	progress("  River, FetchCooldown %s: %.0f/s", peerTunedCooldown, r.tuned.Rate())
	return r, err
}

// riverFill inserts n jobs into riverQueue with InsertManyFast (COPY,
// 10,000 a transaction), then VACUUM ANALYZE and a checkpoint, as fill
// does for Ferry's queue: a settled backlog.
func (b *Bench) riverFill(ctx context.Context, n int) error {
	started := time.Now()
	c, err := b.riverClient(nil, 0)
	if err != nil {
		return err
	}
	const chunk = 10_000
	params := riverParams(chunk, 0)
	for done := 0; done < n; done += chunk {
		if _, err := c.InsertManyFast(ctx, params[:min(chunk, n-done)]); err != nil {
			return fmt.Errorf("River fill: %w", err)
		}
	}
	if _, err := b.raw.Exec(ctx, `VACUUM ANALYZE river_job`); err != nil {
		return err
	}
	progress("  filled %d River jobs in %s", n, time.Since(started).Round(100*time.Millisecond))
	return b.checkpoint(ctx)
}

// riverDrain starts a River client with the no-op worker on the backlog
// and times it from Start until n jobs' completion events (Subscribe,
// EventKindJobCompleted, with room for all of them: River drops events
// that overflow a subscription's channel) have arrived.
func (b *Bench) riverDrain(ctx context.Context, n int, cooldown time.Duration) (Phase, error) {
	c, err := b.riverClient(&riverWorker{}, cooldown)
	if err != nil {
		return Phase{}, err
	}
	events, unsubscribe := c.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: n + 1000})
	defer unsubscribe()
	win := b.startWindow(ctx)
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return Phase{}, err
	}
	defer stopRiver(c)
	limit := time.NewTimer(5 * time.Minute)
	defer limit.Stop()
	for got := 0; got < n; got++ {
		select {
		case _, ok := <-events:
			if !ok {
				return Phase{}, errors.New("River closed the subscription")
			}
		case <-limit.C:
			return Phase{}, fmt.Errorf("%d of %d River jobs completed in 5 minutes", got, n)
		case <-ctx.Done():
			return Phase{}, ctx.Err()
		}
	}
	p := Phase{Messages: int64(n), Elapsed: time.Since(start)}
	win.end(ctx, &p)
	return p, nil
}

// ferryDrain times 8 Ferry consumers, each looping receive (up to 100, no
// wait) and ack, from their start until each has found the queue empty.
func (b *Bench) ferryDrain(ctx context.Context, n int) (Phase, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		acked    atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	win := b.startWindow(ctx)
	start := time.Now()
	for range peerClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				receipts, err := b.client.Receive(ctx, peerQueue, 100, 0)
				if err == nil && len(receipts) == 0 {
					return
				}
				if err == nil {
					err = b.client.Ack(ctx, peerQueue, receipts)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					cancel()
					return
				}
				acked.Add(int64(len(receipts)))
			}
		}()
	}
	wg.Wait()
	p := Phase{Messages: acked.Load(), Elapsed: time.Since(start)}
	if firstErr != nil {
		return p, firstErr
	}
	win.end(ctx, &p)
	if p.Messages != int64(n) {
		return p, fmt.Errorf("%d of %d messages acked", p.Messages, n)
	}
	return p, nil
}
