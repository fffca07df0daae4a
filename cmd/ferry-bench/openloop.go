package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// Publish → arrival latency at a fixed offered load: single-event
// publishes started from a schedule (open loop), and a consumer (scenario
// 9's push receiver, scenario 10's long-polling member) that records when
// each event id first arrived.

// timedPublish is one single-event publish of a latency measurement.
type timedPublish struct {
	id         string
	sent, back time.Time // just before the request; when its answer was read
	err        error
}

// publisher prepares one single-event publish of the id and key given
// (its encoding, before the clock starts); the function it returns sends
// it and returns once its answer was read.
type publisher func(id, key string) func(ctx context.Context) error

// restPublisher publishes to topic through the REST API: one request of
// one event with the bench body.
func (b *Bench) restPublisher(topic string) publisher {
	return func(id, key string) func(ctx context.Context) error {
		k, _ := json.Marshal(key)
		req := []byte(`{"events":[{"id":"` + id + `","type":"` + eventType + `","key":` + string(k) + `,"data":` + body + `}]}`)
		return func(ctx context.Context) error { return b.client.Publish(ctx, topic, req) }
	}
}

// publishAtRate publishes n single events through pub, one every 1/rate s
// from a schedule (open loop: a slow publish does not delay the next),
// with ids prefix-000000 ... It returns when every publish has been
// answered.
func (b *Bench) publishAtRate(ctx context.Context, pub publisher, prefix string, n, rate int, keys []string) []timedPublish {
	out := make([]timedPublish, n)
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	pprof.Do(ctx, pprof.Labels("role", "client", "load", "publish/"+prefix), func(ctx context.Context) {
		for i := range n {
			sleepUntil(ctx, start.Add(time.Duration(i)*interval))
			if ctx.Err() != nil {
				out[i].err = ctx.Err()
				continue
			}
			id := fmt.Sprintf("%s-%06d", prefix, i)
			send := pub(id, keys[i%len(keys)])
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := timedPublish{id: id, sent: time.Now()}
				p.err = send(ctx)
				p.back = time.Now()
				out[i] = p
			}()
		}
	})
	wg.Wait()
	return out
}

// arrivals records when each event id first arrived at a consumer; failed
// carries the consumer's error, if it stops on one.
type arrivals struct {
	mu     sync.Mutex
	at     map[string]time.Time
	dups   int64
	n      atomic.Int64 // distinct ids arrived
	failed chan error
}

func newArrivals() *arrivals {
	return &arrivals{at: map[string]time.Time{}, failed: make(chan error, 1)}
}

// record notes that id arrived at t (again: a duplicate).
func (a *arrivals) record(id string, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, seen := a.at[id]; seen {
		a.dups++
		return
	}
	a.at[id] = t
	a.n.Add(1)
}

// fail reports the consumer's error (the first one).
func (a *arrivals) fail(err error) {
	select {
	case a.failed <- err:
	default:
	}
}

func (a *arrivals) arrival(id string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.at[id]
	return t, ok
}

func (a *arrivals) duplicates() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.dups
}

// await waits until n distinct ids have arrived or the deadline; it
// returns the consumer's error, or ctx's.
func (a *arrivals) await(ctx context.Context, n int64, deadline time.Time) error {
	for a.n.Load() < n && time.Now().Before(deadline) {
		select {
		case err := <-a.failed:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// warmUp publishes, through pub, half a second of events at rate, not
// measured, and waits up to 15 s for all of them to arrive (what:
// "pushed", "polled"). It returns how many it published.
func (b *Bench) warmUp(ctx context.Context, pub publisher, prefix string, rate int, keys []string, a *arrivals, what string) (int, error) {
	warm := rate / 2
	for _, p := range b.publishAtRate(ctx, pub, prefix, warm, rate, keys) {
		if p.err != nil {
			return 0, fmt.Errorf("warm-up publish: %w", p.err)
		}
	}
	if err := a.await(ctx, int64(warm), time.Now().Add(15*time.Second)); err != nil {
		return 0, err
	}
	if got := a.n.Load(); got < int64(warm) {
		return 0, fmt.Errorf("warm-up: %d of %d events %s within 15 s", got, warm, what)
	}
	return warm, nil
}

// publishAndAwait publishes n events at rate through pub, then waits up
// to 10 s for every one that was published to arrive (after the before
// that had already). It returns the publishes and the time it took.
func (b *Bench) publishAndAwait(ctx context.Context, pub publisher, prefix string, n, rate int, keys []string, a *arrivals, before int) ([]timedPublish, time.Duration, error) {
	started := time.Now()
	pubs := b.publishAtRate(ctx, pub, prefix, n, rate, keys)
	ok := 0
	for _, p := range pubs {
		if p.err == nil {
			ok++
		}
	}
	err := a.await(ctx, int64(before+ok), time.Now().Add(10*time.Second))
	return pubs, time.Since(started), err
}

// publishLatency is what a publish → arrival measurement saw.
type publishLatency struct {
	published, failed, arrived int
	dups                       int64
	// latency is publish start → arrival, publish the publish request,
	// after publish answered → arrival.
	latency, publish, after Summary
}

// tallyPublishes measures the publishes against their arrivals.
func tallyPublishes(pubs []timedPublish, a *arrivals) publishLatency {
	var (
		out             publishLatency
		lat, pub, after []time.Duration
		firstErr        error
	)
	for _, p := range pubs {
		if p.err != nil {
			out.failed++
			if firstErr == nil {
				firstErr = p.err
			}
			continue
		}
		out.published++
		pub = append(pub, p.back.Sub(p.sent))
		if at, ok := a.arrival(p.id); ok {
			out.arrived++
			lat = append(lat, at.Sub(p.sent))
			after = append(after, at.Sub(p.back))
		}
	}
	if firstErr != nil {
		progress("  %d publishes failed, the first: %v", out.failed, firstErr)
	}
	out.dups = a.duplicates()
	out.latency, out.publish, out.after = Summarize(lat), Summarize(pub), Summarize(after)
	return out
}
