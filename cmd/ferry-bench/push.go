package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/ferry-mq/ferry/internal/push"
)

// Scenario 9, parts 2 and 3: publish → push-delivered latency at a fixed
// offered load against an in-process receiver, and the statements the
// server ran per delivery meanwhile.

// pushReceiver is the in-process webhook endpoint of part 2: it records
// when each event id first arrived and answers 204.
type pushReceiver struct {
	*arrivals
	srv *http.Server
	url string
}

func startPushReceiver() (*pushReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &pushReceiver{arrivals: newArrivals(), url: "http://" + ln.Addr().String() + "/hook"}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *pushReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	id := req.Header.Get(push.HeaderWebhookID)
	_, _ = io.Copy(io.Discard, req.Body)
	r.record(id, now)
	w.WriteHeader(http.StatusNoContent)
}

func (r *pushReceiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

// pushOutcome is part 2's and part 3's outcome.
type pushOutcome struct {
	publishLatency  // publish → delivered (arrived at the receiver)
	stmts           stmtList
	stmtsOK         bool
	attempts, okAtt int64
	attemptMs       float64
	elapsed         time.Duration
}

// measurePush runs parts 2 and 3.
func (b *Bench) measurePush(ctx context.Context, d time.Duration) (pushOutcome, error) {
	var out pushOutcome
	recv, err := startPushReceiver()
	if err != nil {
		return out, err
	}
	defer recv.close()
	const topic = "bench-push"
	tid, err := b.createTopic(ctx, topic)
	if err != nil {
		return out, err
	}
	subID, err := b.createSubscription(ctx, topic, tid, "push",
		fmt.Sprintf(`{"push":{"url":%q,"timeout_seconds":%d,"max_in_flight":%d}}`, recv.url, pushTimeout, pushMaxInFlight))
	if err != nil {
		return out, fmt.Errorf("push subscription: %w", err)
	}
	defer func() {
		if err := b.deleteTopic(context.WithoutCancel(ctx), topic); err != nil {
			progress("  delete topic %s: %v", topic, err)
		}
	}()
	stop, err := b.trackStatements(ctx)
	if err != nil {
		return out, err
	}
	defer stop()
	keys := eventKeys()

	// Warm-up: half a second at the same rate, all delivered, not counted
	// (the first kick starts the push job).
	warm, err := b.warmUp(ctx, b.restPublisher(topic), "evt_warmup", pushRate, keys, recv.arrivals, "pushed")
	if err != nil {
		return out, err
	}
	var pubs []timedPublish
	measure := func() error {
		var err error
		pubs, out.elapsed, err = b.publishAndAwait(ctx, b.restPublisher(topic), "evt_bench", int(d.Seconds()*pushRate), pushRate, keys, recv.arrivals, warm)
		if err != nil {
			return err
		}
		return ctx.Err()
	}
	if out.stmts, out.stmtsOK, err = b.countStatements(ctx, true, measure); err != nil {
		return out, err
	}
	out.publishLatency = tallyPublishes(pubs, recv.arrivals)
	// The worker records attempts after their requests end: give the last
	// ones a moment.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := b.raw.QueryRow(ctx, `
			SELECT count(*), count(*) FILTER (WHERE ok), coalesce(avg(duration_ms), 0)::float8
			FROM ferry.push_attempts WHERE queue_id = $1 AND message_id LIKE 'evt_bench-%'`, subID).
			Scan(&out.attempts, &out.okAtt, &out.attemptMs); err != nil {
			return out, fmt.Errorf("push attempts: %w", err)
		}
		if out.attempts >= int64(out.arrived) || time.Now().After(deadline) {
			return out, nil
		}
	}
}
