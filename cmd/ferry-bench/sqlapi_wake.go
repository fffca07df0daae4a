package main

import (
	"context"
	"fmt"
	"time"
)

// Scenario 13, latency parts: how soon an event that an application's
// transaction published (ferry.publish) is pushed to a webhook and answers
// a long poll once the transaction commits, against the same event
// published through REST. A SQL publish is appended by the outbox relay,
// woken by the NOTIFY its commit delivers; a REST publish appends in its
// own request.

// via is how a latency part's events are published.
type via int

const (
	viaREST via = iota
	viaSQL
)

func (v via) String() string {
	if v == viaSQL {
		return "sql"
	}
	return "rest"
}

// viaOrder is the order of a latency part's runs, REST, SQL, SQL, REST:
// each side's two runs straddle the other's, so a drift of the shared
// machine's load falls on both alike.
func viaOrder() []via { return []via{viaREST, viaSQL, viaSQL, viaREST} }

// sqlPublisher publishes to topic in an application transaction: the
// order insert and ferry.publish of the event (id and key in its options)
// in one round trip (appTx); it returns when COMMIT's answer was read.
func (b *Bench) sqlPublisher(topic string) publisher {
	const publish = `SELECT * FROM ferry.publish($1, $2, $3::jsonb, jsonb_build_object('id', $4::text, 'key', $5::text))`
	return func(id, key string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			return b.appTx(ctx, body, publish, topic, eventType, body, id, key)
		}
	}
}

// publisherVia is sqlPublisher or restPublisher.
func (b *Bench) publisherVia(v via, topic string) publisher {
	if v == viaSQL {
		return b.sqlPublisher(topic)
	}
	return b.restPublisher(topic)
}

// sqlAPIWake is what the latency parts measured, per side (indexed by
// via): publish → push delivered at a fixed rate, and publish → long poll
// answered one event at a time.
type sqlAPIWake struct {
	push    [2]publishLatency
	poll    [2]wakeResult
	pushFor time.Duration // each push run's publishing time
	polls   int           // long-poll rounds per side
}

// sqlAPILatency runs both latency parts.
func (b *Bench) sqlAPILatency(ctx context.Context) (sqlAPIWake, error) {
	// Push runs: 2 per side of 2.5 s (1 s with -quick), 1,000 events per
	// side (400).
	out := sqlAPIWake{pushFor: 2500 * time.Millisecond, polls: 2 * max(b.opts.WakeIters/2, 1)}
	if b.opts.Quick {
		out.pushFor = time.Second
	}
	var err error
	progress("  SQL API: publish → push delivered, %d events/s, %s per run (%v)", pushRate, out.pushFor, viaOrder())
	if out.push, err = b.sqlAPIPush(ctx, out.pushFor); err != nil {
		return out, fmt.Errorf("push: %w", err)
	}
	progress("  SQL API: publish → long poll answered, %d per side", out.polls)
	if out.poll, err = b.sqlAPIPoll(ctx, out.polls/2); err != nil {
		return out, fmt.Errorf("long poll: %w", err)
	}
	for _, v := range []via{viaREST, viaSQL} {
		progress("  %s: push p50 %s p99 %s; long poll after commit p50 %s p99 %s", v,
			fmtMs(out.push[v].latency.P50), fmtMs(out.push[v].latency.P99), fmtMs(out.poll[v].after.P50), fmtMs(out.poll[v].after.P99))
	}
	return out, nil
}

// sqlAPIPush measures publish → push delivered at pushRate for d per run,
// in the runs of viaOrder, each on a topic of its own.
func (b *Bench) sqlAPIPush(ctx context.Context, d time.Duration) ([2]publishLatency, error) {
	var (
		pubs [2][]timedPublish
		got  [2][]*arrivals
		out  [2]publishLatency
	)
	for run, v := range viaOrder() {
		p, a, err := b.sqlAPIPushRun(ctx, v, run, d)
		if err != nil {
			return out, fmt.Errorf("%s run %d: %w", v, run, err)
		}
		pubs[v], got[v] = append(pubs[v], p...), append(got[v], a)
	}
	for v := range out {
		out[v] = tallyPublishes(pubs[v], mergeArrivals(got[v]...))
	}
	return out, nil
}

// sqlAPIPushRun is one run of the push part: a fresh topic with one push
// subscription to an in-process receiver, a warm-up at the same rate
// whose events are all delivered first (as scenario 9's), then d of
// publishes. It deletes the topic after.
func (b *Bench) sqlAPIPushRun(ctx context.Context, v via, run int, d time.Duration) ([]timedPublish, *arrivals, error) {
	recv, err := startPushReceiver()
	if err != nil {
		return nil, nil, err
	}
	defer recv.close()
	topic := fmt.Sprintf("bench-sql-push-%s-%d", v, run)
	tid, err := b.createTopic(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err := b.deleteTopic(context.WithoutCancel(ctx), topic); err != nil {
			progress("  delete topic %s: %v", topic, err)
		}
	}()
	if _, err := b.createSubscription(ctx, topic, tid, "push",
		fmt.Sprintf(`{"push":{"url":%q,"timeout_seconds":%d,"max_in_flight":%d}}`, recv.url, pushTimeout, pushMaxInFlight)); err != nil {
		return nil, nil, fmt.Errorf("push subscription: %w", err)
	}
	pub, keys, prefix := b.publisherVia(v, topic), eventKeys(), fmt.Sprintf("evt_%s%d", v, run)
	warm, err := b.warmUp(ctx, pub, prefix+"_warmup", pushRate, keys, recv.arrivals, "pushed")
	if err != nil {
		return nil, nil, err
	}
	pubs, _, err := b.publishAndAwait(ctx, pub, prefix, int(d.Seconds()*pushRate), pushRate, keys, recv.arrivals, warm)
	if err == nil {
		err = ctx.Err()
	}
	return pubs, recv.arrivals, err
}

// mergeArrivals is the arrivals of several receivers (of distinct ids) as
// one.
func mergeArrivals(all ...*arrivals) *arrivals {
	out := newArrivals()
	for _, a := range all {
		a.mu.Lock()
		for id, t := range a.at {
			out.at[id] = t
		}
		out.dups += a.dups
		out.n.Add(int64(len(a.at)))
		a.mu.Unlock()
	}
	return out
}

// sqlAPIPoll measures publish → long poll answered: in the runs of
// viaOrder, iters rounds each of scenario 4's loop (wakeLoop), the
// consumer long-polling a pull subscription (receive, max_messages 1,
// wait_seconds 20) and acking what it got, the producer publishing one
// event.
func (b *Bench) sqlAPIPoll(ctx context.Context, iters int) ([2]wakeResult, error) {
	var (
		samples [2]wakeSamples
		out     [2]wakeResult
	)
	for _, v := range []via{viaREST, viaSQL} {
		topic := "bench-sql-poll-" + v.String()
		tid, err := b.createTopic(ctx, topic)
		if err != nil {
			return out, err
		}
		if _, err := b.createSubscription(ctx, topic, tid, "pull", `{}`); err != nil {
			return out, fmt.Errorf("subscription of %s: %w", topic, err)
		}
	}
	keys := eventKeys()
	for run, v := range viaOrder() {
		topic := "bench-sql-poll-" + v.String()
		sub, pub := SubscriptionTarget(topic, "pull"), b.publisherVia(v, topic)
		i := 0
		s, err := wakeLoop(ctx, iters,
			func(ctx context.Context) (func() error, error) {
				receipts, err := b.client.ReceiveFrom(ctx, sub, 1, 20)
				if err != nil {
					return nil, err
				}
				if len(receipts) != 1 {
					return nil, fmt.Errorf("long poll returned %d messages, want 1", len(receipts))
				}
				return func() error { return b.client.AckAt(ctx, sub, receipts) }, nil
			},
			func(ctx context.Context) error {
				i++
				return pub(fmt.Sprintf("evt_poll%d-%06d", run, i), keys[i%len(keys)])(ctx)
			})
		if err != nil {
			return out, fmt.Errorf("%s run %d: %w", v, run, err)
		}
		samples[v].add(s)
	}
	for v := range out {
		out[v] = samples[v].result()
	}
	return out, nil
}
