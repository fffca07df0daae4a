package store

import (
	"sync"
	"time"
)

// ClaimFloors keeps, per queue, a floor under the due time (visible_at)
// of every claimable message, so that a claim enters the claim index at
// the queue's head instead of walking, from the index's start, the
// entries of every message consumed since a held snapshot began, which
// nothing can remove meanwhile (package doc, # Held snapshots). One
// instance keeps one per database (the [Notifier] holds it); a claim
// without one reads from the start (ferry.receive always does).
//
// Why a floor holds: a claim takes the first messages in (visible_at, id)
// order at or after the floor, so what it leaves claimable is due no
// earlier than what it took, and that is due no earlier than it was sent
// (sent_at <= visible_at). What becomes claimable later is due at or
// after its writer's clock: a send, a nack, a lease running out, a
// promotion. Two kinds of message can still fall below it: one whose
// writer committed long after it read the clock (an application's
// transaction calling ferry.send), and one a concurrent claim had locked
// and then rolled back. So the floor is used less ClaimFloorMargin, and
// a claim reads the whole queue at least every ClaimFloorFull: such a
// message waits that long at most. A subscription's seek and creation
// backfill deliver events due at their publish time, long before: they
// drop this instance's floor ([Notifier.Rewound]), and another
// instance's claims find them within ClaimFloorFull (newer messages may
// come first meanwhile; a group's order is its promotion's, not the
// claim's).
type ClaimFloors struct {
	mu     sync.Mutex
	queues map[int64]claimFloor
}

type claimFloor struct {
	at   time.Time // the floor: no claimable message of the queue was sent earlier
	full time.Time // when a claim last read the whole queue
}

const (
	ClaimFloorMargin = 500 * time.Millisecond
	ClaimFloorFull   = time.Second
)

// NewClaimFloors makes an empty [ClaimFloors].
func NewClaimFloors() *ClaimFloors { return &ClaimFloors{queues: map[int64]claimFloor{}} }

// negInfinity is what a claim without a floor passes: PostgreSQL's
// -infinity (pgx encodes the zero time as itself, not as -infinity).
var negInfinity = time.Date(-4000, 1, 1, 0, 0, 0, 0, time.UTC)

// floor is the floor a claim of queue passes at now, and whether the
// claim reads the whole queue (the floor is then minus infinity).
func (f *ClaimFloors) floor(queue int64, now time.Time) (time.Time, bool) {
	if f == nil {
		return negInfinity, true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ok := f.queues[queue]
	if !ok || now.Sub(q.full) >= ClaimFloorFull {
		q.full = now
		f.queues[queue] = q
		return negInfinity, true
	}
	return q.at.Add(-ClaimFloorMargin), false
}

// forget drops queue's floor: its next claim reads the whole queue.
func (f *ClaimFloors) forget(queues []int64) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range queues {
		delete(f.queues, q)
	}
}

// took records what a claim of queue took: the send times of its
// messages. After a claim that read the whole queue the floor is the
// oldest of them (lower than before if it found a late message); after
// one from the floor, it only rises. A claim that took nothing leaves
// it.
func (f *ClaimFloors) took(queue int64, full bool, msgs []Message) {
	if f == nil || len(msgs) == 0 {
		return
	}
	oldest := msgs[0].SentAt
	for _, m := range msgs[1:] {
		if m.SentAt.Before(oldest) {
			oldest = m.SentAt
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queues[queue]
	if full || oldest.After(q.at) {
		q.at = oldest
	}
	f.queues[queue] = q
}
