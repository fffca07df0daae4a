package push

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-mq/ferry/store"
)

// Config tunes push delivery.
type Config struct {
	// Client makes the requests (NewClient: SSRF checks at dial time,
	// no redirects).
	Client *http.Client
	// UserAgent is sent with every request ("Ferry/<version>").
	UserAgent string
	// DisableAfter disables a target whose every attempt has failed for
	// this long (default 5 days).
	DisableAfter time.Duration
	// RunFor is a worker's run budget: past it, a worker leaves when other
	// targets wait for a worker slot (default 10 s). IdleFor is how long a
	// worker waits for new work before leaving (default 5 s); Poll is how
	// often an idle worker looks without a wake-up (default 250 ms).
	RunFor, IdleFor, Poll time.Duration
	// Workers bounds the targets this instance delivers at once (default
	// 100).
	Workers int
	// LeaseTTL is how long a push lease lasts unless renewed (default
	// 4 s): a killed instance's targets are taken over after about this
	// long. Heartbeat is how often held leases are renewed (default 1 s).
	LeaseTTL, Heartbeat time.Duration
	// SweepEvery is the longest the Pusher goes without a sweep (default
	// 30 s).
	SweepEvery time.Duration
	// Notifier wakes workers when their target gets messages, and tells
	// the Pusher of other instances' sends.
	Notifier *store.Notifier
	// Stop is closed when the server shuts down: workers stop claiming,
	// finish the requests in flight, settle them and release their leases.
	Stop <-chan struct{}
	Log  *slog.Logger
	// Observe, if set, is told of every attempt: its outcome ("ok",
	// "failed", "gone") and, for successes, the time from the message's
	// send (or event's publish) to its delivery.
	Observe func(outcome string, sinceSent time.Duration)
}

// leaseMargin is how long before its lease could end (by the local clock)
// a worker stops claiming: it covers the local and the database clock
// running at slightly different rates, and a claim's way to the database.
const leaseMargin = time.Second

// firstSweepWait bounds the wait of the first sweep for the Notifier's
// listener.
const firstSweepWait = 2 * time.Second

// minSweepGap is the shortest time between two sweeps: workers that leave
// at once (a target whose claims fail) must not make the sweep spin.
const minSweepGap = 100 * time.Millisecond

// Pusher runs this instance's push workers: it decides which targets to
// deliver, holds their leases, and starts and stops their workers. Kick
// is cheap and never blocks its caller.
type Pusher struct {
	pool  *pgxpool.Pool
	cfg   Config
	id    string        // this instance's lease owner id (a UUID)
	wakeC chan struct{} // the scheduler has something to do

	mu      sync.Mutex
	kicked  map[int64]bool
	resweep bool
	targets map[int64]bool      // enabled push targets, as of the last sweep
	held    map[int64]time.Time // targets another instance holds, until
	// sweepBy is when a sweep is wanted at the latest (zero: no wish): an
	// acquire found a lease held until then (its target's kick waits for
	// that sweep instead of the fallback), or a failed acquire's backoff
	// ends then.
	sweepBy time.Time
	// acquireFails counts the acquires failed in a row; none is tried
	// before acquireAt (a backoff, while the database refuses writes).
	acquireFails int
	acquireAt    time.Time
	runs         map[int64]*targetRun
	starved      bool           // due targets found no free worker
	yielded      map[int64]bool // left for others at their budget: last in line
	runsWG       sync.WaitGroup
}

// New makes a [Pusher]; Run must run for it to deliver.
func New(pool *pgxpool.Pool, cfg Config) *Pusher {
	cfg.DisableAfter = cmp.Or(cfg.DisableAfter, 5*24*time.Hour)
	cfg.RunFor = cmp.Or(cfg.RunFor, 10*time.Second)
	cfg.IdleFor = cmp.Or(cfg.IdleFor, 5*time.Second)
	cfg.Poll = cmp.Or(cfg.Poll, 250*time.Millisecond)
	cfg.Workers = cmp.Or(max(0, cfg.Workers), 100)
	cfg.LeaseTTL = max(cmp.Or(cfg.LeaseTTL, 4*time.Second), 2*leaseMargin)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, time.Second)
	cfg.SweepEvery = cmp.Or(cfg.SweepEvery, 30*time.Second)
	if cfg.Client == nil {
		cfg.Client = NewClient(false)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	p := &Pusher{
		pool: pool, cfg: cfg, id: newInstanceID(), wakeC: make(chan struct{}, 1),
		kicked: map[int64]bool{}, resweep: true, targets: map[int64]bool{},
		held: map[int64]time.Time{}, runs: map[int64]*targetRun{}, yielded: map[int64]bool{},
	}
	if cfg.Notifier != nil {
		cfg.Notifier.OnNotify(p.heard)
		// A write that made a target's messages claimable (an ack, nack,
		// redrive or seek: store.Notifier.Claimable) kicks it here at once.
		cfg.Notifier.OnClaimable(func(ids []int64) { p.Kick(context.Background(), ids) })
	}
	return p
}

// floors is the claim floors the pusher's claims start from: the
// Notifier's, which this instance's receives share (none without one).
func (p *Pusher) floors() *store.ClaimFloors {
	if p.cfg.Notifier == nil {
		return nil
	}
	return p.cfg.Notifier.Floors()
}

// ID is this instance's lease owner id, as ferry.push_leases.owner shows
// it.
func (p *Pusher) ID() string { return p.id }

// newInstanceID makes a random (version 4) UUID.
func newInstanceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Kick asks for the given queues (or subscriptions) to be pushed now, if
// they are push targets. Call it after the commit that gave them messages.
func (p *Pusher) Kick(_ context.Context, queueIDs []int64) {
	if len(queueIDs) == 0 {
		return
	}
	p.mu.Lock()
	for _, id := range queueIDs {
		p.kicked[id] = true
	}
	p.mu.Unlock()
	p.wake()
}

// Forget makes the [Pusher] read its set of push targets again (after a
// change of push configuration) before it acts on the next kick.
func (p *Pusher) Forget() { p.sweepSoon() }

// heard takes the ids of a NOTIFY (nil: anything may have been missed):
// another instance's sends and publishes are kicks here too, and a
// change of push configuration anywhere calls for a sweep.
func (p *Pusher) heard(ids []int64) {
	if ids == nil {
		p.sweepSoon()
		return
	}
	p.mu.Lock()
	sweep := false
	for _, id := range ids {
		if store.IsPushConfigWakeKey(id) {
			sweep = true
		} else if id > 0 {
			p.kicked[id] = true
		}
	}
	p.resweep = p.resweep || sweep
	p.mu.Unlock()
	p.wake()
}

func (p *Pusher) sweepSoon() {
	p.mu.Lock()
	p.resweep = true
	p.mu.Unlock()
	p.wake()
}

func (p *Pusher) wake() {
	select {
	case p.wakeC <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends, then waits for the workers to finish their
// requests and release their leases.
func (p *Pusher) Run(ctx context.Context) {
	hbDone := make(chan struct{})
	hbStopped := make(chan struct{})
	go func() { defer close(hbStopped); p.heartbeat(ctx, hbDone) }()
	defer func() {
		p.runsWG.Wait() // they stop on ctx or Stop
		close(hbDone)
		<-hbStopped
	}()
	// The first sweep comes when the Notifier starts listening (heard:
	// from then on no other instance's send goes unheard), or after
	// firstSweepWait without it.
	first := time.Duration(0)
	if p.cfg.Notifier != nil {
		first = firstSweepWait
	}
	var (
		lastSweep time.Time
		nextSweep = time.Now().Add(first)
	)
	timer := time.NewTimer(first)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.cfg.Stop:
			return
		case <-p.wakeC:
		case <-timer.C:
			p.sweepSoon()
		}
		p.mu.Lock()
		sweep := p.resweep || !time.Now().Before(nextSweep)
		p.mu.Unlock()
		if sweep && time.Since(lastSweep) < minSweepGap {
			nextSweep = lastSweep.Add(minSweepGap)
			sweep = false
		}
		if sweep {
			lastSweep = time.Now()
			nextSweep = lastSweep.Add(p.sweep(ctx))
		}
		p.startKicked(ctx)
		p.mu.Lock()
		if !p.sweepBy.IsZero() && p.sweepBy.Before(nextSweep) {
			nextSweep = p.sweepBy
		}
		p.sweepBy = time.Time{}
		p.mu.Unlock()
		timer.Reset(max(time.Until(nextSweep), 0))
	}
}

// sweep reads what is due, starts workers for it, and returns when to
// sweep again.
func (p *Pusher) sweep(ctx context.Context) time.Duration {
	p.mu.Lock()
	p.resweep = false
	p.mu.Unlock()
	res, err := store.PushSweep(ctx, p.pool, p.id)
	if err != nil {
		if ctx.Err() == nil {
			p.cfg.Log.Warn("push sweep failed; trying again in a second", "error", err)
		}
		return time.Second
	}
	now := time.Now()
	p.mu.Lock()
	// The sweep sees everything that is due: whether targets wait for a
	// worker, and who yielded, is decided afresh.
	p.starved = false
	clear(p.targets)
	for _, id := range res.Targets {
		p.targets[id] = true
	}
	clear(p.held)
	for id, left := range res.Held {
		p.held[id] = now.Add(left)
	}
	p.mu.Unlock()
	p.start(ctx, res.Due)
	p.mu.Lock()
	clear(p.yielded)
	p.mu.Unlock()
	next := p.cfg.SweepEvery
	if res.Next > 0 {
		next = min(next, res.Next)
	}
	return next
}

// startKicked starts workers for the targets kicked since the last turn:
// those that are push targets, run here by no worker yet, and not held by
// another instance. Ids not known as targets wait for a sweep that is due
// (a target just made is known after it), else they are dropped.
func (p *Pusher) startKicked(ctx context.Context) {
	p.mu.Lock()
	var ids []int64
	now := time.Now()
	for id := range p.kicked {
		if p.targets[id] {
			if p.runs[id] == nil && !now.Before(p.held[id]) {
				ids = append(ids, id)
			}
		} else if p.resweep {
			continue
		}
		delete(p.kicked, id)
	}
	p.mu.Unlock()
	slices.Sort(ids)
	p.start(ctx, ids)
}

// start acquires the leases of as many of the candidates as there are
// free workers (those that yielded their worker last) and starts a worker
// for each lease it got.
func (p *Pusher) start(ctx context.Context, candidates []int64) {
	p.mu.Lock()
	var ids []int64
	for _, id := range candidates {
		if p.runs[id] == nil && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.SortStableFunc(ids, func(a, b int64) int {
		return cmp.Compare(btoi(p.yielded[a]), btoi(p.yielded[b]))
	})
	free := max(p.cfg.Workers-len(p.runs), 0)
	if len(ids) > free {
		p.starved = true
		ids = ids[:free]
	}
	backingOff := time.Now().Before(p.acquireAt)
	p.mu.Unlock()
	if len(ids) == 0 || backingOff {
		return // backing off: the sweep at acquireAt finds what is due
	}
	sent := time.Now()
	res, err := store.PushLeaseAcquire(ctx, p.pool, p.id, ids, p.cfg.LeaseTTL)
	if err != nil {
		if ctx.Err() == nil {
			p.acquireFailed(err)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.acquireFails > 0 {
		p.cfg.Log.Info("push lease acquire works again", "failures", p.acquireFails)
		p.acquireFails, p.acquireAt = 0, time.Time{}
	}
	p.noteHeld(ids, res)
	for _, id := range res.Acquired {
		r := newTargetRun(p, id, sent.Add(p.cfg.LeaseTTL-leaseMargin))
		p.runs[id] = r
		p.runsWG.Add(1)
		go func() {
			defer p.runsWG.Done()
			r.run(ctx)
			p.finished(r)
		}()
	}
}

// maxAcquireBackoff bounds the wait between failed lease acquires.
const maxAcquireBackoff = 5 * time.Second

// acquireFailed backs off after a failed acquire (doubling from
// minSweepGap up to maxAcquireBackoff) and asks for a sweep at its end;
// it warns once per streak of failures.
func (p *Pusher) acquireFailed(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.acquireFails++
	wait := min(minSweepGap<<min(p.acquireFails-1, 16), maxAcquireBackoff)
	p.acquireAt = time.Now().Add(wait)
	if p.sweepBy.IsZero() || p.acquireAt.Before(p.sweepBy) {
		p.sweepBy = p.acquireAt
	}
	if p.acquireFails == 1 {
		p.cfg.Log.Warn("push lease acquire failed; retrying with backoff until it works", "error", err)
	}
}

// noteHeld records the targets of an acquire (ids) that another instance
// holds and asks for a sweep when the first of those leases ends (that
// instance may be dead): a kick for a held target is not dropped for
// good. A target neither acquired nor held lost a race (the lease looked
// expired, and its owner renewed it before the acquire could take it; or
// the target stopped being one): a sweep soon sorts it out. Called with
// p.mu held.
func (p *Pusher) noteHeld(ids []int64, res store.PushLeaseResult) {
	now := time.Now()
	for id, left := range res.Held {
		until := now.Add(left)
		p.held[id] = until
		if p.sweepBy.IsZero() || until.Before(p.sweepBy) {
			p.sweepBy = until
		}
	}
	for _, id := range ids {
		if _, held := res.Held[id]; !held && !slices.Contains(res.Acquired, id) {
			p.resweep = true
			p.wake()
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// finished forgets a worker that left and releases its lease (unless it
// was lost); a sweep then finds what is left to do.
func (p *Pusher) finished(r *targetRun) {
	if !r.leaseLost() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := store.PushLeaseRelease(ctx, p.pool, p.id, []int64{r.id}); err != nil {
			r.log.Warn("push lease release failed; it expires by itself", "error", err)
		}
		cancel()
	}
	p.mu.Lock()
	delete(p.runs, r.id)
	if r.yielded {
		p.yielded[r.id] = true
	}
	p.mu.Unlock()
	p.sweepSoon()
}

// othersWait reports whether due targets found no free worker.
func (p *Pusher) othersWait() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starved
}

// heartbeat renews the leases of the running workers every Heartbeat, in
// one statement, until done is closed (after the workers have finished):
// each renewed lease moves its worker's fence on, each lost one stops its
// worker's claims. With no workers it does nothing.
func (p *Pusher) heartbeat(ctx context.Context, done <-chan struct{}) {
	tick := time.NewTicker(p.cfg.Heartbeat)
	defer tick.Stop()
	// Renewals outlive ctx: workers still deliver after it ends, and
	// their leases must hold until they have settled.
	ctx = context.WithoutCancel(ctx)
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		runs := make(map[int64]*targetRun, len(p.runs))
		ids := make([]int64, 0, len(p.runs))
		for id, r := range p.runs {
			if !r.leaseLost() {
				runs[id] = r
				ids = append(ids, id)
			}
		}
		p.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		sent := time.Now()
		hctx, cancel := context.WithTimeout(ctx, p.cfg.LeaseTTL)
		held, err := store.PushLeaseRenew(hctx, p.pool, p.id, ids, p.cfg.LeaseTTL)
		cancel()
		if err != nil {
			// The workers' fences pass by themselves if this goes on.
			p.cfg.Log.Warn("push lease heartbeat failed", "error", err, "leases", len(ids))
			continue
		}
		for _, id := range held {
			runs[id].renewed(sent.Add(p.cfg.LeaseTTL - leaseMargin))
			delete(runs, id)
		}
		for _, r := range runs {
			r.lose()
		}
	}
}
