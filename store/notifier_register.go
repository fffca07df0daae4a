package store

import (
	"context"
	"slices"
	"time"
)

// A SQL API send NOTIFYs only for queues that some instance registered in
// ferry.wake_waiters (ferry.wake_at_commit; store/doc.go, "# Wakes", has
// the protocol). The functions here are the registering side: a long poll
// about to park registers its queue once (register), looks again, and
// parks; the registration stays while polls wait on the queue and is
// deleted registerIdle after the last one ended (tidyRegistrations). Rows
// are named by the listener connection's backend pid: when the listener
// reconnects, every key registers again, and the old pid's rows are swept.

// registerIdle is how long a key stays registered after its last poll
// ended, registerTidy how often idle keys are deleted, and registerSweep
// how often dead listeners' rows are swept and other releases' listeners
// looked for.
const (
	registerIdle  = 30 * time.Second
	registerTidy  = 10 * time.Second
	registerSweep = 30 * time.Second
)

// Keys of ferry.wake_waiters that are no queue's: a listenerKey row says
// that its listener's polls register (an instance of this release); a
// legacyKey row that its listener's do not (an older release's, found
// listening by sweepListeners): while there is none of the first or any
// of the second, ferry.wake_at_commit NOTIFYs for every key.
const (
	listenerKey = 0
	legacyKey   = -1
)

// registration is this instance's registration of one key.
type registration struct {
	ready chan struct{} // closed once committed (or failed)
	used  time.Time     // when a poll last registered or released it
	held  int           // polls of this key running now
}

// straggler is what a registration waits out: the transactions in
// progress when it committed (a send among them may have missed the row,
// and so sent no NOTIFY), and the keys to wake once all have ended (or
// kick to call: the relay's, relayAsleep).
type straggler struct {
	xids  []int64
	keys  []int64
	kick  func()
	since time.Time
}

// hold counts a long poll on key until the returned function is called,
// so that its registration is kept meanwhile. Keys that are not queues'
// (below 1) always wake, and are not registered.
func (n *Notifier) hold(key int64) (release func()) {
	if key <= 0 || n.pool == nil {
		return func() {}
	}
	n.regMu.Lock()
	n.held[key]++
	n.regMu.Unlock()
	return func() {
		n.regMu.Lock()
		defer n.regMu.Unlock()
		if n.held[key]--; n.held[key] == 0 {
			delete(n.held, key)
		}
		if r := n.regs[key]; r != nil {
			r.used = time.Now()
		}
	}
}

// register makes sure key is registered before a long poll parks on it.
// fresh reports that this call registered it or waited for a
// registration under way: the caller must look for messages once more
// before it parks (a send that committed before the registration sent no
// NOTIFY). A key registered earlier costs a map lookup. A failed
// registration is not fresh: the poll parks on its fallback poll, and the
// next park tries again.
func (n *Notifier) register(ctx context.Context, key int64) (fresh bool) {
	if key <= 0 || n.pool == nil {
		return false
	}
	for {
		n.regMu.Lock()
		listener := n.listenerPID
		if gone, ok := n.removing[key]; ok {
			n.regMu.Unlock()
			select {
			case <-gone:
				continue
			case <-ctx.Done():
				return false
			}
		}
		if listener == 0 { // nobody would hear a NOTIFY: wait on the fallback poll
			n.regMu.Unlock()
			return false
		}
		if r, ok := n.regs[key]; ok {
			r.used = time.Now()
			n.regMu.Unlock()
			select {
			case <-r.ready:
				return false
			default:
			}
			select {
			case <-r.ready:
			case <-ctx.Done():
			}
			return n.registered(key, r)
		}
		r := &registration{ready: make(chan struct{}), used: time.Now()}
		n.regs[key] = r
		n.regMu.Unlock()
		err := n.insertRegistration(ctx, key, listener)
		if err != nil {
			n.regMu.Lock()
			if n.regs[key] == r {
				delete(n.regs, key)
			}
			n.regMu.Unlock()
			if ctx.Err() == nil {
				n.log.Warn("wake registration failed; the poll falls back to polling", "queue", key, "error", err)
			}
		}
		close(r.ready)
		return err == nil
	}
}

// registered reports whether r, whose registration has ended, is still
// key's (it was neither a failure nor forgotten by a listener restart).
func (n *Notifier) registered(key int64, r *registration) bool {
	n.regMu.Lock()
	defer n.regMu.Unlock()
	return n.regs[key] == r
}

// insertRegistration commits key's row, then reads which transactions
// are in progress: any send that missed the row is among them, and
// watchStragglers wakes key once they all have ended, so the poll looks
// again after their commits.
func (n *Notifier) insertRegistration(ctx context.Context, key int64, listener int32) error {
	if _, err := n.pool.Exec(ctx, `/* ferry:wake_register */
		INSERT INTO ferry.wake_waiters (key, listener) VALUES ($1, $2)
		ON CONFLICT (key, listener) DO NOTHING`, key, listener); err != nil {
		return err
	}
	return n.waitOut(ctx, straggler{keys: []int64{key}})
}

// waitOut reads which transactions are in progress now and has s's keys
// woken and its kick called once they all have ended (at once, when none
// is).
func (n *Notifier) waitOut(ctx context.Context, s straggler) error {
	var err error
	if s.xids, err = xidsInProgress(ctx, n.pool); err != nil {
		return err
	}
	if len(s.xids) == 0 {
		if s.kick != nil {
			s.kick()
		}
		return nil
	}
	s.since = time.Now()
	n.regMu.Lock()
	n.stragglers = append(n.stragglers, s)
	n.regMu.Unlock()
	select {
	case n.strKick <- struct{}{}:
	default:
	}
	return nil
}

// forgetRegistrations drops every registration and records the new
// listener's pid (0: none): a new listener starts from nothing, so every
// poll registers again (its rows are the new pid's; the old pid's are
// swept).
func (n *Notifier) forgetRegistrations(listener int32) {
	n.regMu.Lock()
	defer n.regMu.Unlock()
	n.listenerPID = listener
	clear(n.regs)
}

// stragglerMax bounds how long a registration's stragglers are watched:
// a transaction that runs longer is left to the polls' fallback poll.
const stragglerMax = time.Minute

// watchStragglers wakes the keys of each registration once every
// transaction that was in progress at its commit has ended (committed or
// aborted). It looks after 1 ms, then twice as long each time up to 16 ms
// (a send's transaction is short), and up to 200 ms for stragglers older
// than a second (a long transaction), for stragglerMax at most.
func (n *Notifier) watchStragglers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.strKick:
		}
		delay := time.Millisecond
		for n.wakeEndedStragglers(ctx) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			limit := 16 * time.Millisecond
			n.regMu.Lock()
			if len(n.stragglers) > 0 && time.Since(n.stragglers[0].since) > time.Second {
				limit = 200 * time.Millisecond
			}
			n.regMu.Unlock()
			delay = min(delay*2, limit)
		}
	}
}

// wakeEndedStragglers wakes the keys of the stragglers (and calls their
// kick) when any of their transactions has ended since the last look, so
// that a long transaction elsewhere in the cluster does not hold back a
// send that committed; it forgets those whose transactions have all
// ended (or that are older than stragglerMax), and reports whether any
// are left. When the database cannot say, it wakes them all (the polls
// look again) and keeps them.
func (n *Notifier) wakeEndedStragglers(ctx context.Context) bool {
	n.regMu.Lock()
	list := slices.Clone(n.stragglers)
	n.regMu.Unlock()
	if len(list) == 0 {
		return false
	}
	var all []int64
	for _, s := range list {
		all = append(all, s.xids...)
	}
	running, err := xidsStillInProgress(ctx, n.pool, all)
	var (
		wake  []int64
		kicks []func()
	)
	kept := make([]straggler, 0, len(list))
	for _, s := range list {
		if err != nil {
			wake = append(wake, s.keys...)
			if s.kick != nil {
				kicks = append(kicks, s.kick)
			}
			kept = append(kept, s)
			continue
		}
		var left []int64
		for _, x := range s.xids {
			if slices.Contains(running, x) {
				left = append(left, x)
			}
		}
		if len(left) < len(s.xids) || time.Since(s.since) > stragglerMax {
			wake = append(wake, s.keys...)
			if s.kick != nil {
				kicks = append(kicks, s.kick)
			}
		}
		if len(left) == 0 || time.Since(s.since) > stragglerMax {
			continue
		}
		s.xids = left
		kept = append(kept, s)
	}
	n.regMu.Lock()
	n.stragglers = append(kept, n.stragglers[len(list):]...)
	left := len(n.stragglers) > 0
	n.regMu.Unlock()
	if len(wake) > 0 {
		n.wake(wake)
	}
	for _, kick := range kicks {
		kick()
	}
	return left
}

// tidyRegistrations runs until ctx ends: every registerTidy it deletes
// the rows of keys no poll has waited on for registerIdle, and every
// registerSweep (while it listens) it runs sweepListeners. Each statement
// writes nothing when it finds nothing to change. At the end it deletes
// this instance's rows.
func (n *Notifier) tidyRegistrations(ctx context.Context) {
	t := time.NewTicker(registerTidy)
	defer t.Stop()
	swept := time.Now() // the listener's start swept
	for {
		select {
		case <-ctx.Done():
			n.dropListener()
			return
		case <-t.C:
		}
		err := n.tidyOnce(ctx, time.Now().Add(-registerIdle))
		n.regMu.Lock()
		listener := n.listenerPID
		n.regMu.Unlock()
		if err == nil && listener != 0 && time.Since(swept) >= registerSweep {
			swept = time.Now()
			err = n.sweepListeners(ctx)
		}
		if err != nil && ctx.Err() == nil {
			n.log.Warn("tidying wake registrations failed", "error", err)
		}
	}
}

// tidyOnce deletes this instance's registrations that no poll holds and
// none used since before.
func (n *Notifier) tidyOnce(ctx context.Context, before time.Time) error {
	n.regMu.Lock()
	var idle []int64
	for key, r := range n.regs {
		if n.held[key] == 0 && r.used.Before(before) && IsClosed(r.ready) {
			idle = append(idle, key)
			delete(n.regs, key)
		}
	}
	if len(idle) == 0 {
		n.regMu.Unlock()
		return nil
	}
	gone := make(chan struct{})
	for _, key := range idle {
		n.removing[key] = gone
	}
	listener := n.listenerPID
	n.regMu.Unlock()
	defer func() {
		n.regMu.Lock()
		for _, key := range idle {
			delete(n.removing, key)
		}
		n.regMu.Unlock()
		close(gone)
	}()
	_, err := n.pool.Exec(ctx, `/* ferry:wake_unregister */
		DELETE FROM ferry.wake_waiters WHERE listener = $1 AND key = ANY($2)`, listener, idle)
	return err
}

// announceListener records, before the listener's LISTEN, that the polls
// of the listener with this backend pid register (so that sweepListeners,
// here or on another instance, never takes it for an older release's),
// and sweeps.
func (n *Notifier) announceListener(ctx context.Context, pid int32) error {
	if _, err := n.pool.Exec(ctx, `/* ferry:wake_listener */
		INSERT INTO ferry.wake_waiters (key, listener) VALUES ($1, $2) ON CONFLICT DO NOTHING`, listenerKey, pid); err != nil {
		return err
	}
	return n.sweepListeners(ctx)
}

// sweepListeners deletes the rows of every listener pid that no backend
// has now (a dead or reconnected instance: it registers again), and marks
// every session that LISTENs on Ferry's channel without a listenerKey row
// (an older release's instance, whose polls do not register) with a
// legacyKey row, so that every SQL API wake NOTIFYs while it runs. (A
// listener of this release that LISTENed as its row committed may be
// marked; the next sweep deletes the mark.)
func (n *Notifier) sweepListeners(ctx context.Context) error {
	_, err := n.pool.Exec(ctx, `/* ferry:wake_sweep */
		WITH swept AS (
			DELETE FROM ferry.wake_waiters w
			WHERE NOT EXISTS (SELECT FROM pg_stat_activity a WHERE a.pid = w.listener)
				OR (w.key = $1 AND EXISTS (SELECT FROM ferry.wake_waiters x WHERE x.key = $2 AND x.listener = w.listener))
		)
		INSERT INTO ferry.wake_waiters (key, listener)
		SELECT $1, a.pid FROM pg_stat_activity a
		WHERE a.datname = current_database() AND a.query = 'LISTEN ' || $3::text
			AND NOT EXISTS (SELECT FROM ferry.wake_waiters w WHERE w.key IN ($1, $2) AND w.listener = a.pid)
		ON CONFLICT DO NOTHING`, legacyKey, listenerKey, notifyChannel)
	return err
}

// dropListener deletes this instance's rows as it stops, so that senders
// stop notifying for its polls at once (and, were no instance of this
// release left, NOTIFY for every key again: an older release's polls do
// not register).
func (n *Notifier) dropListener() {
	n.regMu.Lock()
	listener := n.listenerPID
	n.regMu.Unlock()
	if listener == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := n.pool.Exec(ctx, `/* ferry:wake_drop */
		DELETE FROM ferry.wake_waiters WHERE listener = $1`, listener); err != nil {
		n.log.Warn("deleting wake registrations failed; another instance sweeps them", "error", err)
	}
}

// xidsInProgress lists the transactions in progress now (the xip list of
// a snapshot taken now): whoever must wait out a commit's stragglers.
func xidsInProgress(ctx context.Context, db DBTX) ([]int64, error) {
	var xids []int64
	err := db.QueryRow(ctx, `/* ferry:wake_register_snapshot */
		SELECT coalesce(array_agg(x::text::bigint), '{}') FROM pg_snapshot_xip(pg_current_snapshot()) AS x`).Scan(&xids)
	return xids, err
}

// xidsStillInProgress is the part of xids still in progress.
func xidsStillInProgress(ctx context.Context, db DBTX, xids []int64) ([]int64, error) {
	var running []int64
	err := db.QueryRow(ctx, `/* ferry:wake_stragglers */
		SELECT coalesce(array_agg(x), '{}') FROM unnest($1::bigint[]) AS x
		WHERE pg_xact_status(x::text::xid8) = 'in progress'`, xids).Scan(&running)
	return running, err
}
