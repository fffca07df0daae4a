package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/ferry-mq/ferry/client"
)

// Scenario 16's latency part: 1,000 jobs (messages) a second, 10 every
// 10 ms from a schedule (open loop), each carrying when its insert (send)
// started, consumed as they come.

// peerWarmup is the lead-in of a latency run whose inserts are not counted.
const peerWarmup = 500 * time.Millisecond

// peerLatency is what one latency run saw: handed over is River's worker
// called / Ferry's receive answered, done is River's completion event /
// Ferry's ack answered, each minus the start of the insert (send).
type peerLatency struct {
	sent, handed, done int
	handedAt, doneAt   Summary
}

// peerSamples collects a run's latencies of the inserts started at or
// after from.
type peerSamples struct {
	from         int64 // UnixNano
	mu           sync.Mutex
	handed, done []time.Duration
}

// add records one job's hand-over (done false) or completion at at.
func (s *peerSamples) add(sentNs int64, at time.Time, done bool) {
	if sentNs < s.from {
		return
	}
	d := at.Sub(time.Unix(0, sentNs))
	s.mu.Lock()
	defer s.mu.Unlock()
	if done {
		s.done = append(s.done, d)
	} else {
		s.handed = append(s.handed, d)
	}
}

// doneCount is how many counted jobs have completed.
func (s *peerSamples) doneCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.done)
}

// result summarises the samples against the sent counted.
func (s *peerSamples) result(sent int) peerLatency {
	s.mu.Lock()
	defer s.mu.Unlock()
	return peerLatency{sent: sent, handed: len(s.handed), done: len(s.done), handedAt: Summarize(s.handed), doneAt: Summarize(s.done)}
}

// atPeerRate calls insert with its start time every peerTick for the
// warm-up plus d (open loop: each call in its own goroutine) and returns,
// after every call has returned, how many of those started at or after
// from succeeded, or the first error.
func atPeerRate(ctx context.Context, d time.Duration, from time.Time, insert func(ctx context.Context, t0 time.Time) error) (int, error) {
	var (
		mu       sync.Mutex
		counted  int
		firstErr error
		wg       sync.WaitGroup
	)
	start := from.Add(-peerWarmup)
	pprof.Do(ctx, pprof.Labels("role", "client", "load", "river-peer-latency"), func(ctx context.Context) {
		for i := 0; start.Add(time.Duration(i) * peerTick).Before(from.Add(d)); i++ {
			sleepUntil(ctx, start.Add(time.Duration(i)*peerTick))
			if ctx.Err() != nil {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				err := insert(ctx, t0)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil && firstErr == nil:
					firstErr = err
				case err == nil && !t0.Before(from):
					counted += peerPerTick
				}
			}()
		}
	})
	wg.Wait()
	if firstErr != nil {
		return counted, firstErr
	}
	return counted, ctx.Err()
}

// awaitDone waits up to 10 s for n counted completions.
func awaitDone(ctx context.Context, s *peerSamples, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for s.doneCount() < n && time.Now().Before(deadline) && ctx.Err() == nil {
		sleepUntil(ctx, time.Now().Add(5*time.Millisecond))
	}
}

// riverLatency is River's run: one client inserts (InsertMany of 10) and
// works the jobs with the no-op worker, cooldown its FetchCooldown (0:
// River's default).
func (b *Bench) riverLatency(ctx context.Context, d, cooldown time.Duration) (peerLatency, error) {
	from := time.Now().Add(time.Second + peerWarmup) // the client starts in the first second
	s := &peerSamples{from: from.UnixNano()}
	c, err := b.riverClient(&riverWorker{seen: func(sentNs int64, at time.Time) { s.add(sentNs, at, false) }}, cooldown)
	if err != nil {
		return peerLatency{}, err
	}
	events, unsubscribe := c.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: max(100_000, 2*peerPerTick*int((d+time.Second)/peerTick))})
	defer unsubscribe()
	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	go func() {
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					return
				}
				at := time.Now()
				var a riverArgs
				if json.Unmarshal(ev.Job.EncodedArgs, &a) == nil {
					s.add(a.SentNs, at, true)
				}
			case <-evCtx.Done():
				return
			}
		}
	}()
	if err := c.Start(ctx); err != nil {
		return peerLatency{}, err
	}
	defer stopRiver(c)
	sleepUntil(ctx, from.Add(-peerWarmup))
	sent, err := atPeerRate(ctx, d, from, func(ctx context.Context, t0 time.Time) error {
		_, err := c.InsertMany(ctx, riverParams(peerPerTick, t0.UnixNano()))
		return err
	})
	if err != nil {
		return peerLatency{}, err
	}
	awaitDone(ctx, s, sent)
	return s.result(sent), ctx.Err()
}

// ferryLatency is Ferry's run: sends of 10 messages whose body carries
// the send's start, and 8 consumers long-polling (up to 10, wait 1 s) and
// acking what they get.
func (b *Bench) ferryLatency(ctx context.Context, d time.Duration) (peerLatency, error) {
	from := time.Now().Add(peerWarmup)
	s := &peerSamples{from: from.UnixNano()}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	failed := make(chan error, peerClients)
	var wg sync.WaitGroup
	for range peerClients {
		wg.Add(1)
		go pprof.Do(cctx, pprof.Labels("role", "client", "load", "river-peer-latency/ferry"), func(ctx context.Context) {
			defer wg.Done()
			if err := b.ferryConsume(ctx, s); err != nil && ctx.Err() == nil {
				failed <- err
			}
		})
	}
	sent, err := atPeerRate(ctx, d, from, func(ctx context.Context, t0 time.Time) error {
		return b.client.Send(ctx, peerQueue, timedSendRequest(t0))
	})
	if err == nil {
		awaitDone(ctx, s, sent)
	}
	stop()
	wg.Wait()
	select {
	case err = <-failed:
	default:
	}
	if err != nil {
		return peerLatency{}, err
	}
	return s.result(sent), ctx.Err()
}

// timedSendRequest is a send of peerPerTick messages, each the bench
// body with the send's start (sent_ns) in front.
func timedSendRequest(t0 time.Time) []byte {
	m := `{"body":{"sent_ns":` + strconv.FormatInt(t0.UnixNano(), 10) + `,` + body[1:] + `}`
	req := []byte(`{"messages":[`)
	for i := range peerPerTick {
		if i > 0 {
			req = append(req, ',')
		}
		req = append(req, m...)
	}
	return append(req, `]}`...)
}

// ferryConsume is one Ferry consumer of the latency run, until ctx ends.
func (b *Bench) ferryConsume(ctx context.Context, s *peerSamples) error {
	for ctx.Err() == nil {
		ms, err := b.client.c.Receive(ctx, peerQueue, client.Receive{MaxMessages: peerPerTick, WaitSeconds: 1})
		if err != nil {
			return err
		}
		at := time.Now()
		sent := make([]int64, len(ms))
		receipts := make([]string, len(ms))
		for i, m := range ms {
			var v struct {
				SentNs int64 `json:"sent_ns"`
			}
			if err := json.Unmarshal(m.Body, &v); err != nil {
				return fmt.Errorf("message body: %w", err)
			}
			sent[i], receipts[i] = v.SentNs, m.Receipt
			s.add(v.SentNs, at, false)
		}
		if len(ms) == 0 {
			continue
		}
		if err := b.client.Ack(ctx, peerQueue, receipts); err != nil {
			return err
		}
		at = time.Now()
		for _, ns := range sent {
			s.add(ns, at, true)
		}
	}
	return nil
}
