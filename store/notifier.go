package store

import (
	"cmp"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// notifyChannel is the Postgres channel on which Ferry instances announce
// that queues got new messages. The payload is a comma-separated list of
// queue ids.
const notifyChannel = "ferry_messages"

// Notifier wakes long polls when messages arrive, in this process and in
// every other Ferry instance on the same database.
//
// After a send commits, Published wakes local waiters at once and queues a
// NOTIFY. NOTIFYs are rate-limited: at most one per Window, carrying every
// queue that got messages since the last one (never one per message or per
// send: NOTIFY takes a global lock at commit). The first send after a quiet
// period is announced immediately. Each instance LISTENs on one dedicated
// connection and wakes its waiters for the queues named. Waiters also poll
// on their own every FallbackPoll, which covers messages that become
// visible by time (delays, expired leases) and a lost listener connection.
type Notifier struct {
	pool   *pgxpool.Pool
	window time.Duration
	log    *slog.Logger

	heard   []func(ids []int64) // see OnNotify
	claimed func(ids []int64)   // see OnClaimable

	floors *ClaimFloors // see Floors

	listening atomic.Bool  // see Listening
	parked    atomic.Int64 // see Parked
	ignored   atomic.Int64 // see Ignored

	mu      sync.Mutex
	waiters map[int64]chan struct{} // closed (and replaced) to wake
	pending map[int64]struct{}
	kick    chan struct{}

	// Registrations in ferry.wake_waiters (notifier_register.go).
	regMu       sync.Mutex
	listenerPID int32 // the LISTEN connection's backend pid; 0 while none
	regs        map[int64]*registration
	held        map[int64]int
	removing    map[int64]chan struct{} // closed once the DELETE is done
	stragglers  []straggler
	strKick     chan struct{}
}

// NewNotifier makes a [Notifier]; Run starts it.
func NewNotifier(pool *pgxpool.Pool, window time.Duration, log *slog.Logger) *Notifier {
	if window <= 0 {
		window = 10 * time.Millisecond
	}
	return &Notifier{
		pool:    pool,
		window:  window,
		log:     log,
		floors:  NewClaimFloors(),
		waiters: map[int64]chan struct{}{},
		pending: map[int64]struct{}{},
		kick:    make(chan struct{}, 1),

		regs:     map[int64]*registration{},
		held:     map[int64]int{},
		removing: map[int64]chan struct{}{},
		strKick:  make(chan struct{}, 1),
	}
}

// Wait returns a channel that is closed the next time queueID may have new
// messages. Take it before checking for messages, so that a wake between
// the check and the wait is not lost.
func (n *Notifier) Wait(queueID int64) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.waiters[queueID]
	if !ok {
		ch = make(chan struct{})
		n.waiters[queueID] = ch
	}
	return ch
}

// wake wakes the local waiters of the given queues (all queues if ids is
// nil).
func (n *Notifier) wake(ids []int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ids == nil {
		for id, ch := range n.waiters {
			close(ch)
			delete(n.waiters, id)
		}
		return
	}
	for _, id := range ids {
		if ch, ok := n.waiters[id]; ok {
			close(ch)
			delete(n.waiters, id)
		}
	}
}

// OnNotify has fn called with the ids of every NOTIFY the listener hears
// (this instance's own included), and with nil whenever it (re)starts
// listening (anything may have been missed meanwhile). Each function
// given is called, in the order given; they run on the listener's
// goroutine and must not block. Set them before Run.
func (n *Notifier) OnNotify(fn func(ids []int64)) { n.heard = append(n.heard, fn) }

// Floors is this instance's claim floors on the Notifier's database
// ([ClaimFloors]): what its receives and pushes claim from.
func (n *Notifier) Floors() *ClaimFloors { return n.floors }

// Listening reports whether the listener connection is up now, so that
// every NOTIFY from here on is heard (what a cache invalidated by NOTIFY
// may trust only meanwhile).
func (n *Notifier) Listening() bool { return n.listening.Load() }

// tell calls every OnNotify function with ids.
func (n *Notifier) tell(ids []int64) {
	for _, fn := range n.heard {
		fn(ids)
	}
}

// Parked is how many long polls of this instance wait now: each has
// found nothing and waits for a wake-up, its fallback poll or its end
// (what a gauge reports, and what a test awaits before it makes the
// change that must wake one).
func (n *Notifier) Parked() int64 { return n.parked.Load() }

// Ignored is how many parts of the NOTIFY payloads heard on Ferry's
// channel were no id (Ferry's own payloads are ids only), and so were
// ignored: another database login's NOTIFYs, which a counter in /metrics
// shows.
func (n *Notifier) Ignored() int64 { return n.ignored.Load() }

// Published announces that the queues got messages (call after commit).
func (n *Notifier) Published(queueIDs []int64) {
	n.wake(queueIDs)
	n.mu.Lock()
	for _, id := range queueIDs {
		n.pending[id] = struct{}{}
	}
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Run listens and notifies until ctx ends.
func (n *Notifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); n.listen(ctx) }()
	go func() { defer wg.Done(); n.announce(ctx) }()
	go func() { defer wg.Done(); n.watchStragglers(ctx) }()
	go func() { defer wg.Done(); n.tidyRegistrations(ctx) }()
	wg.Wait()
}

func (n *Notifier) announce(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.kick:
		}
		if wait := n.window - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		n.mu.Lock()
		ids := make([]string, 0, len(n.pending))
		for id := range n.pending {
			ids = append(ids, strconv.FormatInt(id, 10))
		}
		clear(n.pending)
		n.mu.Unlock()
		last = time.Now()
		// Payloads must stay under 8000 bytes.
		for len(ids) > 0 {
			k := min(len(ids), 500)
			if _, err := n.pool.Exec(ctx, `/* ferry:notify */ SELECT pg_notify($1, $2)`, notifyChannel, strings.Join(ids[:k], ",")); err != nil && ctx.Err() == nil {
				n.log.Warn("notify failed; waiters fall back to polling", "error", err)
			}
			ids = ids[k:]
		}
	}
}

// listenBackoff bounds the pause between two attempts to reconnect the
// listener: the first is after a tenth of a second, each next one twice as
// long, up to this. It is short so that after a failover the listener is
// back within about a second of the new primary (reconnecting costs one
// connection attempt per second while the database is away).
const listenBackoff = time.Second

// listen keeps a LISTEN connection open until ctx ends, reconnecting with
// backoff when it breaks (through the pool's connection settings, so a
// multi-host URL finds the new primary after a failover). Each new LISTEN
// starts the backoff afresh and wakes every waiter once: messages may have
// arrived while no one listened.
func (n *Notifier) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		listened, err := n.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			backoff = 100 * time.Millisecond
		}
		n.log.Warn("listener connection lost; reconnecting", "error", err, "in", backoff)
		n.forgetRegistrations(0) // a NOTIFY would go unheard: polls wait on their fallback poll
		n.wake(nil)              // let waiters check for themselves meanwhile
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, listenBackoff)
	}
}

// listenOnce connects, LISTENs and wakes waiters on notifications until
// the connection fails; listened reports whether LISTEN succeeded.
func (n *Notifier) listenOnce(ctx context.Context) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, n.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	// The backend's own pid (through a pooler too), read first so that
	// LISTEN stays the session's last statement (as tests and operators
	// look for it).
	var pid int32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return false, err
	}
	if err := n.announceListener(ctx, pid); err != nil && ctx.Err() == nil {
		// Without the row, SQL API wakes NOTIFY for every key: no wake is lost.
		n.log.Warn("announcing the listener failed", "error", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return false, err
	}
	n.forgetRegistrations(pid) // polls register again, as this listener's
	n.wake(nil)                // anything sent while we were not listening
	n.tell(nil)
	n.listening.Store(true)
	defer n.listening.Store(false)
	for {
		note, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if ids := n.parsePayload(note.Payload); len(ids) > 0 {
			n.wake(ids)
			n.tell(ids)
		}
	}
}

// parsePayload returns the ids of a NOTIFY payload, counting the parts
// that are none (see Ignored).
func (n *Notifier) parsePayload(payload string) []int64 {
	var ids []int64
	for _, s := range strings.Split(payload, ",") {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			n.ignored.Add(1)
			continue
		}
		ids = append(ids, id)
	}
	return ids
}

// longPoll calls try until it finds something, fails, or wait has passed,
// re-trying whenever the Notifier wakes key and at least every poll
// (default 1s). It ends early, finding nothing, when stop closes or ctx
// ends. With a nil Notifier it tries once. Before it first parks it
// registers key (so that SQL API sends to it NOTIFY) and tries again, and
// it keeps the registration while it runs (notifier_register.go).
func longPoll(ctx context.Context, n *Notifier, key int64, wait, poll time.Duration, stop <-chan struct{}, try func() (bool, error)) error {
	deadline := time.Now().Add(wait)
	poll = cmp.Or(poll, time.Second)
	holding := false
	for {
		var wake <-chan struct{}
		if n != nil {
			// Taken before trying, so a wake-up in between is not lost.
			wake = n.Wait(key)
		}
		found, err := try()
		if err != nil || found {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 || n == nil {
			return nil
		}
		if !holding {
			holding = true
			defer n.hold(key)()
		}
		if n.register(ctx, key) {
			continue // a send that committed before the registration sent no NOTIFY: look again
		}
		timer := time.NewTimer(min(left, poll))
		n.parked.Add(1)
		select {
		case <-wake:
		case <-timer.C:
		case <-stop:
		case <-ctx.Done():
		}
		n.parked.Add(-1)
		timer.Stop()
		if ctx.Err() != nil || IsClosed(stop) {
			return nil
		}
	}
}

// rechecked returns try preceded, on every call but the first, by check
// (when there is one): a long poll's check, after each wait and before it
// claims or reads, that its caller may still have what it finds (the
// request's key was not revoked and has not expired meanwhile). An error
// of check is the try's, so it ends the poll with nothing tried.
func rechecked(ctx context.Context, check func(context.Context) error, try func() (bool, error)) func() (bool, error) {
	if check == nil {
		return try
	}
	first := true
	return func() (bool, error) {
		if !first {
			if err := check(ctx); err != nil {
				return false, err
			}
		}
		first = false
		return try()
	}
}

// IsClosed reports, without waiting, whether ch is closed: a stop
// channel's "have we been told to stop?" (the Notifier's waits and the
// push worker ask it).
func IsClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
