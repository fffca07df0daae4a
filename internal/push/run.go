package push

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ferry-mq/ferry/store"
)

// targetRun is one worker delivering one push target while this instance
// holds the target's lease: a loop of named steps (claim, wait, collect,
// settle, refresh) over the state they share.
type targetRun struct {
	p   *Pusher
	id  int64
	log *slog.Logger
	t   store.PushTarget

	results  chan pushResult // requests report here
	inFlight int
	pending  []pushResult // results not settled yet
	limiter  rateLimiter
	// runUntil is the run budget's end; idleUntil when the worker leaves
	// if nothing comes; refreshAt when it re-reads its target.
	runUntil, idleUntil, refreshAt time.Time
	// mayHaveWork: a claim may find something. False after a claim that
	// found fewer than it asked for, until a wake-up, the poll, or a
	// settle that may have released or promoted a message.
	mayHaveWork bool
	// changed is closed when the target's push configuration changes
	// (store.PushConfigWakeKey): it applies from the next claim.
	changed <-chan struct{}
	// stop: claim no more (shutdown, lease lost, budget spent while other
	// targets wait); yielded: stopped for the budget.
	stop, yielded bool

	mu    sync.Mutex
	fence time.Time     // claims only before this, by the local clock
	lost  bool          // the lease was taken over
	lostC chan struct{} // closed when lost
}

func newTargetRun(p *Pusher, id int64, fence time.Time) *targetRun {
	now := time.Now()
	return &targetRun{
		p: p, id: id, log: p.cfg.Log.With("queue_id", id),
		results:  make(chan pushResult, store.MaxPushInFlight),
		runUntil: now.Add(p.cfg.RunFor), idleUntil: now.Add(p.cfg.IdleFor), refreshAt: now.Add(time.Second),
		mayHaveWork: true, fence: fence, lostC: make(chan struct{}),
	}
}

// targetAttrs name a target in log lines: its queue, or its topic and
// subscription, and its id.
func targetAttrs(t store.PushTarget) []any {
	if t.Subscription {
		return []any{"topic", t.Topic, "subscription", t.Name, "queue_id", t.ID}
	}
	return []any{"queue", t.Name, "queue_id", t.ID}
}

// renewed moves the fence on after a heartbeat kept the lease.
func (r *targetRun) renewed(fence time.Time) {
	r.mu.Lock()
	if !r.lost {
		r.fence = fence
	}
	r.mu.Unlock()
}

// lose records that the lease was taken over: no more claims.
func (r *targetRun) lose() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.lost {
		r.lost = true
		close(r.lostC)
	}
}

func (r *targetRun) leaseLost() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost
}

func (r *targetRun) fenceAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fence
}

// run delivers the target's messages until it is idle, its lease is lost,
// its budget is spent while others wait, or the server stops; then it
// waits for its requests and settles them.
func (r *targetRun) run(ctx context.Context) {
	if !r.load(ctx) {
		return
	}
	// Requests and settling outlive a cancelled context only as long as
	// they must: requests have their own timeout, settling its own.
	reqCtx := context.WithoutCancel(ctx)
	for r.active() {
		if store.IsClosed(r.changed) {
			if r.refresh(ctx); !r.active() {
				break
			}
		}
		r.limiter.setRate(r.t.Push.RateLimitPerSecond)
		r.checkStop(ctx)
		wake := r.p.cfg.Notifier.Wait(r.id) // before the claim: no wake-up is lost
		claimed, ok := r.claim(ctx, reqCtx)
		if !ok {
			break
		}
		if claimed > 0 {
			r.idleUntil = time.Now().Add(r.p.cfg.IdleFor)
		}
		if r.inFlight == 0 && claimed == 0 && (r.stop || time.Now().After(r.idleUntil)) {
			break
		}
		r.wait(ctx, wake)
		r.collect()
		r.settlePending()
		if time.Now().After(r.refreshAt) {
			r.refresh(ctx)
		}
	}
	r.finish()
}

// load reads the target; false if it is gone or unreadable.
func (r *targetRun) load(ctx context.Context) bool {
	r.changed = r.p.cfg.Notifier.Wait(store.PushConfigWakeKey(r.id))
	t, err := store.PushTargetGet(ctx, r.p.pool, r.id)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
			r.log.Warn("push target read failed", "error", err)
		}
		return false
	}
	r.t = t
	r.log = r.p.cfg.Log.With(targetAttrs(t)...)
	return true
}

// active: the target still has push, enabled.
func (r *targetRun) active() bool { return r.t.Push != nil && r.t.DisabledAt == nil }

// refresh re-reads the target's configuration (a new secret, URL or
// limits, push removed); the periodic re-read covers a lost announcement.
func (r *targetRun) refresh(ctx context.Context) {
	r.changed = r.p.cfg.Notifier.Wait(store.PushConfigWakeKey(r.id))
	if nt, err := store.PushTargetGet(ctx, r.p.pool, r.id); err == nil {
		nt.FailingSince = r.t.FailingSince
		r.t = nt
	} else if errors.Is(err, store.ErrNotFound) {
		r.t.Push = nil
	}
	r.refreshAt = time.Now().Add(time.Second)
}

// checkStop decides whether to claim no more: on shutdown, when the lease
// is lost, and past the budget when other targets wait for a worker
// (then the target yields its worker and is started again after them).
func (r *targetRun) checkStop(ctx context.Context) {
	switch {
	case r.stop:
	case r.leaseLost():
		r.stop = true
		r.log.Warn("push lease lost: another instance delivers this target now")
	case store.IsClosed(r.p.cfg.Stop) || ctx.Err() != nil:
		r.stop = true
	case time.Now().After(r.runUntil) && r.p.othersWait():
		r.stop, r.yielded = true, true
	}
}

// claim claims what the free slots and the rate limit allow and starts a
// request for each; it reports how many, and false when the worker must
// leave (the claim failed).
func (r *targetRun) claim(ctx, reqCtx context.Context) (int, bool) {
	if r.stop || r.inFlight >= r.t.Push.MaxInFlight || !r.mayHaveWork {
		return 0, true
	}
	fence := r.fenceAt()
	if !time.Now().Before(fence) {
		return 0, true // self-fenced until a heartbeat renews the lease
	}
	n := min(r.t.Push.MaxInFlight-r.inFlight, r.limiter.allowance())
	if n <= 0 {
		return 0, true
	}
	cctx, cancel := context.WithDeadline(ctx, fence)
	msgs, _, err := store.PushLeaseClaim(cctx, r.p.pool, r.p.id, store.ClaimParams{
		Queue: r.t.Queue, Max: n,
		VisibilityTimeout: time.Duration(r.t.Push.TimeoutSeconds)*time.Second + leaseSlack,
		Floors:            r.p.floors(),
	})
	fenced := cctx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case errors.Is(err, store.ErrPushLeaseLost):
		r.lose()
		return 0, true
	case err != nil && fenced:
		return 0, true // the fence came first: no request starts after it
	case err != nil:
		if ctx.Err() == nil {
			r.log.Warn("push claim failed", "error", err)
		}
		return 0, false
	}
	for _, m := range msgs {
		r.limiter.take()
		r.inFlight++
		go func(t store.PushTarget, m store.Message) { r.results <- r.p.deliver(reqCtx, t, m) }(r.t, m)
	}
	r.mayHaveWork = len(msgs) == n
	return len(msgs), true
}

// wait waits for a result, a wake-up (when a slot is free), a change of
// configuration, the rate limiter, or the poll.
func (r *targetRun) wait(ctx context.Context, wake <-chan struct{}) {
	var wakeCh <-chan struct{}
	if !r.stop && r.inFlight < r.t.Push.MaxInFlight {
		wakeCh = wake
	}
	// Once stopping, only results matter: a closed Stop, done context or
	// lost lease would end every wait at once and spin the loop.
	stopCh, doneCh, lostCh := r.p.cfg.Stop, ctx.Done(), (<-chan struct{})(r.lostC)
	if r.stop {
		stopCh, doneCh, lostCh = nil, nil, nil
	}
	timer := time.NewTimer(min(r.p.cfg.Poll, r.limiter.untilNext()))
	defer timer.Stop()
	select {
	case res := <-r.results:
		r.inFlight--
		r.pending = append(r.pending, res)
	case <-wakeCh:
		r.mayHaveWork = true
	case <-r.changed:
	case <-timer.C:
		r.mayHaveWork = true
	case <-stopCh:
	case <-doneCh:
	case <-lostCh:
	}
	if store.IsClosed(wake) {
		r.mayHaveWork = true // woken while requests were in flight
	}
}

// collect takes every result that has arrived.
func (r *targetRun) collect() {
	for {
		select {
		case res := <-r.results:
			r.inFlight--
			r.pending = append(r.pending, res)
		default:
			return
		}
	}
}

// settlePending settles the collected results. A failure released a
// message (maybe visible at once), and an ack may have promoted the next
// of a group: a claim may find work again.
func (r *targetRun) settlePending() {
	if len(r.pending) == 0 {
		return
	}
	if r.settle(r.pending) {
		r.mayHaveWork = true
	}
	r.pending = r.pending[:0]
}

// finish waits for the requests in flight and settles them.
func (r *targetRun) finish() {
	for r.inFlight > 0 {
		r.pending = append(r.pending, <-r.results)
		r.inFlight--
	}
	r.settlePending()
}
