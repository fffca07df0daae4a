package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Two instances' lease owner ids.
const (
	ownerA = "00000000-0000-4000-8000-00000000000a"
	ownerB = "00000000-0000-4000-8000-00000000000b"
)

func (e *env) pushQueue(name string) store.Queue {
	e.t.Helper()
	q, _, err := store.QueueUpsert(e.ctx, e.pool, name, store.QueuePatch{Push: pushPatch("https://a.example/h", "whsec_x")})
	require.NoError(e.t, err)
	return q
}

// expireLease makes a lease end in the past, as a killed owner's does.
func (e *env) expireLease(q store.Queue) {
	e.t.Helper()
	_, err := e.pool.Exec(e.ctx, `UPDATE ferry.push_leases SET expires_at = now() - interval '1 millisecond' WHERE queue_id = $1`, q.ID)
	require.NoError(e.t, err)
}

// A push lease: acquired when free, refused while another instance's is
// live, taken over once it expired; a heartbeat renews what is still held
// and reports the lost; a release frees it at once.
func TestPushLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.pushQueue("leased")
	other := e.pushQueue("other")
	pull := e.queue("pull", store.QueuePatch{})
	const ttl = 5 * time.Second

	// Free: A gets it. Only push targets are leased.
	res, err := store.PushLeaseAcquire(e.ctx, e.pool, ownerA, []int64{q.ID, pull.ID, 1 << 40}, ttl)
	require.NoError(t, err)
	require.Equal(t, []int64{q.ID}, res.Acquired)
	require.Empty(t, res.Held)
	// Again by A: still A's, renewed.
	res, err = store.PushLeaseAcquire(e.ctx, e.pool, ownerA, []int64{q.ID}, ttl)
	require.NoError(t, err)
	require.Equal(t, []int64{q.ID}, res.Acquired)

	// Live: B is refused, told how long is left, and nothing is written.
	res, err = store.PushLeaseAcquire(e.ctx, e.pool, ownerB, []int64{q.ID, other.ID}, ttl)
	require.NoError(t, err)
	require.Equal(t, []int64{other.ID}, res.Acquired)
	require.Contains(t, res.Held, q.ID)
	require.InDelta(t, ttl.Seconds(), res.Held[q.ID].Seconds(), 1)
	require.Equal(t, ownerA, e.leaseOwner(q))

	// Claims for a target: only by its lease's owner.
	e.send(q, store.SendMessage{Body: []byte(`1`)})
	_, _, err = store.PushLeaseClaim(e.ctx, e.pool, ownerB, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
	require.ErrorIs(t, err, store.ErrPushLeaseLost)
	msgs, _, err := store.PushLeaseClaim(e.ctx, e.pool, ownerA, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, 1)

	// Expired: B takes it over; A's heartbeat finds it lost, and A can
	// claim no more.
	e.expireLease(q)
	_, _, err = store.PushLeaseClaim(e.ctx, e.pool, ownerA, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
	require.ErrorIs(t, err, store.ErrPushLeaseLost, "an expired lease claims nothing")
	res, err = store.PushLeaseAcquire(e.ctx, e.pool, ownerB, []int64{q.ID}, ttl)
	require.NoError(t, err)
	require.Equal(t, []int64{q.ID}, res.Acquired)
	require.Equal(t, ownerB, e.leaseOwner(q))
	held, err := store.PushLeaseRenew(e.ctx, e.pool, ownerA, []int64{q.ID}, ttl)
	require.NoError(t, err)
	require.Empty(t, held, "A's heartbeat: the lease is lost")
	held, err = store.PushLeaseRenew(e.ctx, e.pool, ownerB, []int64{q.ID, other.ID}, ttl)
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{q.ID, other.ID}, held)

	// A's release leaves B's lease alone; B's frees it for A at once.
	require.NoError(t, store.PushLeaseRelease(e.ctx, e.pool, ownerA, []int64{q.ID}))
	require.Equal(t, ownerB, e.leaseOwner(q))
	require.NoError(t, store.PushLeaseRelease(e.ctx, e.pool, ownerB, []int64{q.ID}))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.push_leases WHERE queue_id = $1`, q.ID))
	res, err = store.PushLeaseAcquire(e.ctx, e.pool, ownerA, []int64{q.ID}, ttl)
	require.NoError(t, err)
	require.Equal(t, []int64{q.ID}, res.Acquired)

	// A deleted target's lease goes with it.
	_, err = store.QueueDelete(e.ctx, e.pool, "other")
	require.NoError(t, err)
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.push_leases WHERE queue_id = $1`, other.ID))
}

func (e *env) leaseOwner(q store.Queue) string {
	e.t.Helper()
	var owner string
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT owner::text FROM ferry.push_leases WHERE queue_id = $1`, q.ID).Scan(&owner))
	return owner
}

// The sweep finds the enabled targets with a message claimable now and no
// live lease of another instance, and when to look next: the next message
// to become visible, or the end of another instance's lease over
// claimable messages.
func TestPushSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	due := e.pushQueue("due")
	later := e.pushQueue("later")
	off := e.pushQueue("off")
	pull := e.queue("pull", store.QueuePatch{})
	empty := e.pushQueue("empty")
	heldByB := e.pushQueue("held-by-b")
	mine := e.pushQueue("mine")

	hour, minute := time.Hour, time.Minute
	e.send(due, store.SendMessage{Body: []byte(`1`)})
	e.send(later, store.SendMessage{Body: []byte(`1`), Delay: &minute})
	e.send(later, store.SendMessage{Body: []byte(`2`), Delay: &hour})
	e.send(off, store.SendMessage{Body: []byte(`1`)})
	e.send(pull, store.SendMessage{Body: []byte(`1`)})
	e.send(heldByB, store.SendMessage{Body: []byte(`1`)})
	e.send(mine, store.SendMessage{Body: []byte(`1`)})
	_, err := store.PushOutcome(e.ctx, e.pool, off.ID, false, "gone", time.Hour)
	require.NoError(t, err)
	for owner, q := range map[string]store.Queue{ownerB: heldByB, ownerA: mine} {
		_, err := store.PushLeaseAcquire(e.ctx, e.pool, owner, []int64{q.ID}, 30*time.Second)
		require.NoError(t, err)
	}

	res, err := store.PushSweep(e.ctx, e.pool, ownerA)
	require.NoError(t, err)
	require.Equal(t, []int64{due.ID, later.ID, empty.ID, heldByB.ID, mine.ID}, res.Targets, "%s", res)
	require.Equal(t, []int64{due.ID, mine.ID}, res.Due, "%s", res)
	require.Len(t, res.Held, 1, "%s", res)
	require.InDelta(t, 30, res.Held[heldByB.ID].Seconds(), 2, "%s", res)
	require.InDelta(t, 30, res.Next.Seconds(), 2, "next: B's lease ends: %s", res)

	// Once B's lease is gone, the next thing due is the delayed message.
	require.NoError(t, store.PushLeaseRelease(e.ctx, e.pool, ownerB, []int64{heldByB.ID}))
	res, err = store.PushSweep(e.ctx, e.pool, ownerA)
	require.NoError(t, err)
	require.Equal(t, []int64{due.ID, heldByB.ID, mine.ID}, res.Due, "%s", res)
	require.Empty(t, res.Held)
	require.InDelta(t, 60, res.Next.Seconds(), 2, "next: the delayed message: %s", res)

	// Its lease expired: due for B as for anyone.
	e.expireLease(mine)
	res, err = store.PushSweep(e.ctx, e.pool, ownerB)
	require.NoError(t, err)
	require.Contains(t, res.Due, mine.ID)
}
