package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// partOf is the partition of message id of q.
func (e *env) partOf(q store.Queue, id int64) int {
	e.t.Helper()
	var p int
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT part FROM ferry.messages WHERE queue_id = $1 AND id = $2`, q.ID, id).Scan(&p))
	return p
}

// routed is whether every row of q sits where ferry.message_part routes
// its visible_at now, or in COLD.
func (e *env) requireRouted(q store.Queue) {
	e.t.Helper()
	require.Zero(e.t, e.count(`SELECT count(*) FROM ferry.messages
		WHERE queue_id = $1 AND part <> 16 AND part <> ferry.message_part(visible_at, clock_timestamp())
			AND NOT (part <> 17 AND visible_at <= clock_timestamp())`, q.ID), "rows outside their slot")
}

// forceRotation forwards every ring slot's rows to COLD (as if every slot
// were about to be reused), sweeps all of FAR into the ring, and truncates
// every slot it can; it returns the slots truncated.
func (e *env) forceRotation() []int {
	e.t.Helper()
	shape, now, err := store.RingShapeGet(e.ctx, e.pool)
	require.NoError(e.t, err)
	_, err = store.RingSweep(e.ctx, e.pool, now.Add(24*time.Hour), 100000)
	require.NoError(e.t, err)
	var truncated []int
	for s := range shape.Slots {
		_, err := store.RingForward(e.ctx, e.pool, s, now.Add(24*time.Hour), 100000)
		require.NoError(e.t, err)
		got, err := store.RingTruncate(e.ctx, e.pool, s, store.RingWaitMin)
		require.NoError(e.t, err)
		if got == store.RingTruncated {
			truncated = append(truncated, s)
		}
	}
	return truncated
}

// Sends land in the slot of now, delayed ones far ahead in FAR; a claim,
// an extend and a nack move the row to the slot of its new visible_at; a
// move counts neither as a delete nor as an insert.
func TestRingRouting(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "ring-routing", store.QueuePatch{})
	ids := each(e.send(q, msg(1), msg(2), store.SendMessage{Body: json.RawMessage(`{}`), Delay: ptr(time.Hour)}),
		func(r store.SendResult) int64 { return r.ID })
	require.Equal(t, 17, e.partOf(q, ids[2]), "a message due in an hour is in FAR")
	require.Less(t, e.partOf(q, ids[0]), 16)
	e.requireRouted(q)
	got := e.claim(q, 2, 20*time.Second)
	require.Len(t, got, 2)
	e.requireRouted(q)
	e.requireCountersExact(q)
	require.Equal(t, []bool{true}, e.extend(q, time.Hour, got[0].Receipt))
	require.Equal(t, 17, e.partOf(q, got[0].ID), "a lease of an hour is in FAR")
	res, _ := e.nack(store.NackParams{Queue: q, Receipts: []store.Receipt{got[1].Receipt}, Delay: ptr(10 * time.Second)})
	require.Equal(t, []bool{true}, res)
	e.requireRouted(q)
	e.requireCountersExact(q)
	require.Equal(t, int64(3), e.live(q))
}

// Across a forced rotation (every slot forwarded to COLD, FAR swept into
// the ring, every empty slot truncated): nothing is lost, receipts from
// before still ack, a leased message is not delivered again while its
// receipt is current, groups keep their order with followers in several
// partitions, dedup holds across it, counters stay exact.
func TestRingForcedRotation(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "ring-rotation", store.QueuePatch{})
	e.send(q, msg(1), msg(2), msg(3))
	leased := e.claim(q, 2, time.Minute) // leases within the horizon, in a ring slot
	require.Len(t, leased, 2)
	e.sendClaimed(q, msg(4), time.Hour) // takes msg(3), the oldest available, for an hour: in FAR
	e.send(q, grouped("g", 1), grouped("g", 2))
	dedup := store.SendMessage{Body: json.RawMessage(`{"d":1}`), DedupID: "d1"}
	first := e.send(q, dedup)[0]
	e.forceRotation()
	e.send(q, grouped("g", 3))
	require.True(t, e.send(q, dedup)[0].Duplicate, "dedup across the rotation")
	require.Equal(t, first.ID, e.send(q, dedup)[0].ID)
	require.Positive(t, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND part = 16`, q.ID))
	e.requireCountersExact(q)
	e.forceRotation()
	e.requireCountersExact(q)

	// The leases of before: current, not delivered again; their receipts ack.
	var seqs []int
	for {
		got := e.claim(q, 10, time.Minute)
		if len(got) == 0 {
			break
		}
		for _, m := range got {
			for _, l := range leased {
				require.NotEqual(t, l.ID, m.ID, "a message delivered while its receipt was current")
			}
			var b struct {
				G   string `json:"g"`
				Seq int    `json:"seq"`
			}
			require.NoError(t, json.Unmarshal(m.Body, &b))
			if b.G == "g" {
				seqs = append(seqs, b.Seq)
			}
			require.Equal(t, []bool{true}, e.ack(q, m.Receipt))
		}
		e.forceRotation()
	}
	require.Equal(t, []int{1, 2, 3}, seqs, "the group in order")
	require.Equal(t, []bool{true, true}, e.ack(q, leased[0].Receipt, leased[1].Receipt), "receipts from before the rotations")
	e.requireCountersExact(q)
	require.Equal(t, int64(1), e.live(q), "one message left, on its hour's lease")
}

// Truncation never loses a row: a slot with a live row is left, and so is
// one an open transaction has inserted into (the lock is not granted
// within the timeout); once that commits, its row is there.
func TestRingTruncateRefuses(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "ring-truncate", store.QueuePatch{})
	id := e.send(q, msg(1))[0].ID
	slot := e.partOf(q, id)
	got, err := store.RingTruncate(e.ctx, e.pool, slot, store.RingWaitMin)
	require.NoError(t, err)
	require.Equal(t, store.RingLive, got, "a slot with a live message")
	require.Equal(t, int64(1), e.live(q))

	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	_, err = store.MessageSendTx(e.ctx, tx, q, []store.SendMessage{msg(2)})
	require.NoError(t, err)
	claimed := e.claim(q, 1, time.Minute) // msg 1 leaves its slot
	require.Len(t, claimed, 1)
	require.Equal(t, []bool{true}, e.ack(q, claimed[0].Receipt))
	var txSlot int
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT part FROM ferry.messages WHERE queue_id = $1`, q.ID).Scan(&txSlot))
	got, err = store.RingTruncate(e.ctx, e.pool, txSlot, store.RingWaitMin)
	require.NoError(t, err)
	require.Equal(t, store.RingBusy, got, "a slot an open transaction wrote to")
	require.NoError(t, tx.Commit(e.ctx))
	require.Equal(t, int64(1), e.live(q), "the committed message is there")
	e.requireCountersExact(q)
}

// A pass of the rotator over an idle ring does nothing: after a pass that
// truncated what it could, the next finds no slot with storage but the
// ones in use, moves nothing and truncates nothing.
func TestRingRotateIdle(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "ring-idle", store.QueuePatch{})
	e.send(q, msg(1))
	got := e.claim(q, 1, time.Second)
	require.Equal(t, []bool{true}, e.ack(q, got[0].Receipt))
	e.forceRotation()
	p, err := store.RingRotate(e.ctx, e.pool, store.RingWaitMin)
	require.NoError(t, err)
	require.Zero(t, p.Swept)
	require.Zero(t, p.Forwarded)
	require.Empty(t, p.Truncated)
	shape, _, err := store.RingShapeGet(e.ctx, e.pool)
	require.NoError(t, err)
	stored, err := store.RingSlotsStored(e.ctx, e.pool, shape)
	require.NoError(t, err)
	require.Empty(t, stored, "every slot truncated")
	// What the pass wrote: nothing (no transaction id was taken).
	var xid int64
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := store.RingRotate(e.ctx, tx, store.RingWaitMin); err != nil {
			return err
		}
		return tx.QueryRow(e.ctx, `SELECT coalesce(txid_current_if_assigned(), 0)`).Scan(&xid)
	}))
	require.Zero(t, xid, "an idle pass took a transaction id")
}

// A slot some transaction holds (every statement on ferry.messages locks
// every slot) is left busy after the wait, and truncated by a longer one
// that outlasts the holder; the rotator's wait doubles only while slots
// are busy, up to its bound, and falls back once one is granted.
func TestRingTruncateWaits(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "ring-truncate-waits", store.QueuePatch{})
	id := e.send(q, msg(1))[0].ID
	slot := e.partOf(q, id)
	got := e.claim(q, 1, time.Minute) // the row leaves for its lease's slot
	require.Len(t, got, 1)
	require.Equal(t, []bool{true}, e.ack(q, got[0].Receipt))

	holder, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(e.ctx) }()
	var n int
	require.NoError(t, holder.QueryRow(e.ctx, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, q.ID).Scan(&n))
	require.Zero(t, n)
	res, err := store.RingTruncate(e.ctx, e.pool, slot, store.RingWaitMin)
	require.NoError(t, err)
	require.Equal(t, store.RingBusy, res, "the holder outlasts the shortest wait")

	done := make(chan store.RingTruncation, 1)
	go func() {
		res, err := store.RingTruncate(e.ctx, e.pool, slot, time.Second)
		assert.NoError(t, err)
		done <- res
	}()
	require.Eventually(t, func() bool {
		return e.count(`SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock'
			AND relation = format('ferry.messages_%s', lpad($1::int::text, 2, '0'))::regclass`, slot) == 1
	}, 10*time.Second, time.Millisecond, "the truncation waits for the slot's lock")
	require.NoError(t, holder.Commit(e.ctx))
	require.Equal(t, store.RingTruncated, <-done, "granted once the holder ends, within the wait")

	require.Equal(t, 2*store.RingWaitMin, store.RingNextWait(store.RingWaitMin, true))
	require.Equal(t, store.RingWaitMax, store.RingNextWait(store.RingWaitMax, true))
	require.Equal(t, store.RingWaitMin, store.RingNextWait(store.RingWaitMax, false))
}
