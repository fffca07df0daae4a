package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"
)

// Handler handles one message. Returning nil acks it; an error nacks it
// (the queue's backoff decides when it comes back); an error wrapped by
// [Permanent] dead-letters it. A panic is a nack with the panic's text.
// Its context ends when the drain bound passes or the message's claim is
// lost (an extend found the receipt stale).
type Handler func(ctx context.Context, m *Message) error

// WorkOptions tune [Client.Work]; the zero value works.
type WorkOptions struct {
	// Concurrency is how many messages are handled at once (default 1).
	Concurrency int
	// Visibility is the claim on each received message (default: the
	// queue's visibility timeout, read once when Work starts), whole
	// seconds of at least 1.
	Visibility time.Duration
	// ExtendEvery is how often a running handler's claim is renewed, for
	// Visibility again (default Visibility/2; at least 500 ms).
	ExtendEvery time.Duration
	// WaitSeconds is the long poll of each receive (default 20).
	WaitSeconds int
	// DrainTimeout bounds the wait for running handlers once ctx ends
	// (default 30 s). Messages whose handler has not returned by then are
	// neither acked nor nacked: their claim runs out and Ferry delivers them
	// again.
	DrainTimeout time.Duration
	// OnError, when set, is told of every error the loop meets and goes on
	// from (a receive backed off, an ack that failed, a handler's error). It
	// is called from the loop's goroutines, possibly at once.
	OnError func(error)
}

// Work receives messages from queue and hands each to h, with
// opts.Concurrency receivers each long-polling for one message. While h
// runs, the claim is extended every opts.ExtendEvery. Receives that fail
// with 429, 503 or a network error are backed off (at least Retry-After)
// and tried again; any other error of a receive (the queue does not exist,
// the key may not receive) ends the loop.
//
// When ctx ends Work stops receiving, waits up to opts.DrainTimeout for
// running handlers (still acking or nacking their messages), and returns
// ctx's error; it returns earlier with the first fatal receive error. A
// message that a receive cut short by ctx had already claimed comes back
// when its claim runs out.
// Messages are acked at most once, and only after h returned nil. A
// handler still running after the drain bound keeps its goroutine until it
// returns; its result is dropped.
func (c *Client) Work(ctx context.Context, queue string, h Handler, opts WorkOptions) error {
	o, err := opts.withDefaults(ctx, queue, func() (int, error) {
		q, err := c.GetQueue(ctx, queue)
		if err != nil {
			return 0, err
		}
		return q.VisibilityTimeoutSeconds, nil
	})
	if err != nil {
		return err
	}
	w := &worker{c: c, name: queue, base: queuePath(queue), o: o}
	w.receive = func(ctx context.Context, r Receive) ([]job, error) {
		ms, err := c.Receive(ctx, queue, r)
		jobs := make([]job, len(ms))
		for i := range ms {
			m := &ms[i]
			jobs[i] = job{id: m.ID, receipt: m.Receipt, run: func(ctx context.Context) error { return h(ctx, m) }}
		}
		return jobs, err
	}
	return w.work(ctx)
}

// WorkEvents is [Client.Work] for a subscription of a topic: the same
// loop, options and guarantees, with the subscription's deliveries.
func (c *Client) WorkEvents(ctx context.Context, topic, sub string, h EventHandler, opts WorkOptions) error {
	name := topic + "/" + sub
	o, err := opts.withDefaults(ctx, name, func() (int, error) {
		s, err := c.GetSubscription(ctx, topic, sub)
		if err != nil {
			return 0, err
		}
		return s.VisibilityTimeoutSeconds, nil
	})
	if err != nil {
		return err
	}
	w := &worker{c: c, name: name, base: subPath(topic, sub), o: o}
	w.receive = func(ctx context.Context, r Receive) ([]job, error) {
		ds, err := c.ReceiveEvents(ctx, topic, sub, r)
		jobs := make([]job, len(ds))
		for i := range ds {
			d := &ds[i]
			jobs[i] = job{id: d.ID, receipt: d.Receipt, run: func(ctx context.Context) error { return h(ctx, d) }}
		}
		return jobs, err
	}
	return w.work(ctx)
}

// work runs the receivers until ctx ends, then drains (see [Client.Work]).
func (w *worker) work(ctx context.Context) error {
	o := w.o
	// life outlives ctx by the drain bound: handlers, extends, acks and
	// nacks of messages already received use it.
	life, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	recvCtx, fatal := context.WithCancelCause(ctx)
	defer fatal(nil)
	w.life = life
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.run(recvCtx); err != nil {
				fatal(err)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-recvCtx.Done():
		select {
		case <-done:
		case <-time.After(o.DrainTimeout):
		}
	}
	stop()
	if ctx.Err() == nil {
		return context.Cause(recvCtx) // a receive failed for good
	}
	return ctx.Err()
}

// withDefaults fills in the zero options; visibility reads the target's
// visibility timeout when o.Visibility is not given.
func (o WorkOptions) withDefaults(ctx context.Context, name string, visibility func() (int, error)) (WorkOptions, error) {
	o.Concurrency = max(o.Concurrency, 1)
	if o.WaitSeconds <= 0 {
		o.WaitSeconds = 20
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.Visibility <= 0 {
		v, err := visibility()
		if err != nil {
			return o, fmt.Errorf("ferry: work on %s: %w", name, err)
		}
		o.Visibility = time.Duration(v) * time.Second
	}
	o.Visibility = time.Duration(seconds(o.Visibility)) * time.Second
	if o.ExtendEvery <= 0 {
		o.ExtendEvery = o.Visibility / 2
	}
	o.ExtendEvery = max(o.ExtendEvery, 500*time.Millisecond)
	return o, nil
}

// EventHandler handles one delivery of a subscription, as [Handler] does
// a queue's message.
type EventHandler func(ctx context.Context, d *Delivery) error

// job is one received message or delivery: its id, its claim, and the
// handler bound to it.
type job struct {
	id, receipt string
	run         func(ctx context.Context) error
}

// worker is the state the receivers of one [Client.Work] share.
type worker struct {
	c *Client
	// name is the queue's (or topic/subscription) for errors; base its path.
	name, base string
	receive    func(ctx context.Context, r Receive) ([]job, error)
	o          WorkOptions
	life       context.Context
}

func (w *worker) report(err error) {
	if w.o.OnError != nil {
		w.o.OnError(err)
	}
}

// run receives and handles one message at a time until ctx ends (nil) or a
// receive fails for good (its error).
func (w *worker) run(ctx context.Context) error {
	fails := 0
	for ctx.Err() == nil {
		jobs, err := w.receive(ctx, Receive{
			MaxMessages: 1, WaitSeconds: w.o.WaitSeconds,
			VisibilityTimeoutSeconds: seconds(w.o.Visibility),
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !transient(err) {
				return fmt.Errorf("ferry: work on %s: %w", w.name, err)
			}
			w.report(err)
			fails++
			_ = sleep(ctx, w.c.backoff(min(fails, 8), err))
			continue
		}
		fails = 0
		for _, j := range jobs {
			w.handle(j)
		}
	}
	return nil
}

// transient reports whether a receive that failed with err may succeed later.
func transient(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Temporary() || e.Status == http.StatusRequestTimeout
	}
	return true
}

// handle runs the handler on m, extending its claim while it runs, then acks
// or nacks it (unless the drain bound passed first).
func (w *worker) handle(m job) {
	hctx, cancel := context.WithCancel(w.life)
	defer cancel()
	stopExtend := w.extendWhile(hctx, cancel, m.receipt)
	err := w.call(hctx, m)
	stopExtend()
	if w.life.Err() != nil {
		return // the drain bound passed: leave the message to its claim
	}
	switch {
	case err == nil:
		if _, aerr := w.c.ack(w.life, w.base, []string{m.receipt}); aerr != nil {
			w.report(fmt.Errorf("ferry: ack %s: %w", m.id, aerr))
		}
		return
	case IsPermanent(err):
		w.report(fmt.Errorf("ferry: message %s dead-lettered: %w", m.id, err))
		w.nack(m, Nack{Error: errorText(err), DeadLetter: true})
	default:
		w.report(fmt.Errorf("ferry: message %s nacked: %w", m.id, err))
		w.nack(m, Nack{Error: errorText(err)})
	}
}

func (w *worker) nack(m job, n Nack) {
	if _, err := w.c.nack(w.life, w.base, n, []string{m.receipt}); err != nil {
		w.report(fmt.Errorf("ferry: nack %s: %w", m.id, err))
	}
}

// call runs the handler, turning a panic into an error.
func (w *worker) call(ctx context.Context, m job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return m.run(ctx)
}

// extendWhile renews the claim on receipt every ExtendEvery until the
// returned stop is called. A stale receipt (the claim was lost) cancels the
// handler's context through lost.
func (w *worker) extendWhile(ctx context.Context, lost context.CancelFunc, receipt string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(w.o.ExtendEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			res, err := w.c.extend(ctx, w.base, w.o.Visibility, []string{receipt})
			if err != nil {
				w.report(fmt.Errorf("ferry: extend: %w", err))
				continue
			}
			if len(res) == 1 && res[0].Status != "ok" {
				w.report(fmt.Errorf("ferry: extend: the claim was lost (receipt %s)", res[0].Status))
				lost()
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// errorText is err's text cut to the 4096 bytes a nack keeps.
func errorText(err error) string {
	s := err.Error()
	if len(s) <= 4096 {
		return s
	}
	s = s[:4096]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
