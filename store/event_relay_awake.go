package store

import (
	"context"
	"strconv"
	"time"
)

// A relay that finds pending events stays awake: it looks again every
// relayAwakePoll on its own, and says so by a row of [RelayWakeKey] in
// ferry.wake_waiters (named by its Notifier's listener pid, refreshed
// every relayAwakeRefresh), so that ferry.publish skips the NOTIFY, whose
// commit would wait for every other notifying commit's fsync (store/doc.go,
// "# Wakes"). A publish trusts a row refreshed within the last second: a
// relay that died stops being trusted within it. After relayAwakeIdle
// with nothing found the relay deletes the row, looks once more at once,
// and again once every transaction in progress at the delete's commit
// has ended (a publish among them may have read the row and sent no
// NOTIFY), then waits for NOTIFYs.
const (
	relayAwakePoll    = 5 * time.Millisecond
	relayAwakeIdle    = 50 * time.Millisecond
	relayAwakeRefresh = 250 * time.Millisecond
)

// relayAwake is the relay's awake row: the listener pid that names it (0
// while asleep), when it was last written and when the relay last found
// events.
type relayAwake struct {
	pid              int32
	refreshed, found time.Time
}

// stayAwake updates the relay's awake state after a look that found
// events or not: awake (or refreshed) when it found some, asleep once it
// has found none for relayAwakeIdle. A relay without a Notifier never
// wakes: publishes NOTIFY.
func (r *Relay) stayAwake(ctx context.Context, found bool) {
	if r.n == nil {
		return
	}
	now := time.Now()
	if found {
		r.awake.found = now
	}
	switch {
	case r.awake.pid == 0 && !found:
	case r.awake.pid != 0 && now.Sub(r.awake.found) >= r.awakeIdle:
		if err := r.n.relayAsleep(ctx, r.awake.pid, r.Kick); err != nil {
			// Still awake: the next look tries again.
			r.log.Warn("relay: going to sleep failed; looking on", "error", err)
			return
		}
		r.awake.pid = 0
		r.Kick() // the look after the delete
	case r.awake.pid == 0 || now.Sub(r.awake.refreshed) >= relayAwakeRefresh:
		pid, err := r.n.relayAwake(ctx)
		if err != nil {
			r.log.Warn("relay: saying it is awake failed; publishes NOTIFY", "error", err)
			return
		}
		if r.awake.pid != 0 && pid != r.awake.pid {
			// A new listener (or none): the old pid's row may be fresh
			// for up to a second, and publishes reading it skip their
			// NOTIFY: it goes to sleep as the relay does.
			if err := r.n.relayAsleep(ctx, r.awake.pid, r.Kick); err != nil {
				r.log.Warn("relay: deleting its old awake row failed; looking on", "error", err)
				return
			}
		}
		r.awake.pid, r.awake.refreshed = pid, now
	}
}

// relayAwake writes the awake row of this instance's relay, registered
// now by the database's clock, and returns the listener pid that names
// it: 0 when nothing listens (no row; publishes NOTIFY).
func (n *Notifier) relayAwake(ctx context.Context) (int32, error) {
	n.regMu.Lock()
	pid := n.listenerPID
	n.regMu.Unlock()
	if pid == 0 {
		return 0, nil
	}
	_, err := n.pool.Exec(ctx, `/* ferry:relay_awake */
		INSERT INTO ferry.wake_waiters (key, listener, registered_at) VALUES ($1, $2, clock_timestamp())
		ON CONFLICT (key, listener) DO UPDATE SET registered_at = excluded.registered_at`, RelayWakeKey, pid)
	return pid, err
}

// relayAsleep deletes the relay's awake row of listener pid and has kick
// called once every transaction in progress at that commit has ended.
func (n *Notifier) relayAsleep(ctx context.Context, pid int32, kick func()) error {
	if _, err := n.pool.Exec(ctx, `/* ferry:relay_asleep */
		DELETE FROM ferry.wake_waiters WHERE key = $1 AND listener = $2`, RelayWakeKey, pid); err != nil {
		return err
	}
	return n.waitOut(ctx, straggler{kick: kick})
}

// sleepOnStop deletes the awake row of a relay that stops, waits (up to
// relayStopWait) for the transactions in progress at that commit to end
// (a publish among them may have read the row and sent no NOTIFY), and
// then NOTIFYs the relays' key, so that another instance's relay looks
// for what they published. (One still running then is found by the next
// NOTIFY, or a relay's fallback poll.)
func (r *Relay) sleepOnStop() {
	if r.n == nil || r.awake.pid == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), relayStopWait+time.Second)
	defer cancel()
	_, err := r.pool.Exec(ctx, `/* ferry:relay_asleep */
		DELETE FROM ferry.wake_waiters WHERE key = $1 AND listener = $2`, RelayWakeKey, r.awake.pid)
	if err == nil {
		err = r.outwait(ctx)
	}
	if err == nil {
		_, err = r.pool.Exec(ctx, `/* ferry:relay_stop_notify */ SELECT pg_notify('ferry_messages', $1)`, strconv.FormatInt(RelayWakeKey, 10))
	}
	if err != nil {
		r.log.Warn("relay: going to sleep as it stops failed; its row is stale within a second", "error", err)
	}
	r.awake.pid = 0
}

// relayStopWait bounds how long a stopping relay waits for publishes that
// may have read its awake row.
const relayStopWait = 2 * time.Second

// outwait returns once every transaction in progress now has ended, or
// after relayStopWait.
func (r *Relay) outwait(ctx context.Context) error {
	xids, err := xidsInProgress(ctx, r.pool)
	deadline := time.Now().Add(relayStopWait)
	for err == nil && len(xids) > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		xids, err = xidsStillInProgress(ctx, r.pool, xids)
	}
	return err
}
