package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// raceWithExtend runs op while another transaction holds an extend of r
// uncommitted (a consumer's heartbeat extending the lease at the moment
// its main loop settles the message): op's statement must find the row
// changed under it, wait for that transaction, and then act on the row's
// newest version. op runs on pool "racer"; the extend commits once op
// waits for its lock, so the interleaving happens every time.
func (e *env) raceWithExtend(q store.Queue, r store.Receipt, op func(db store.DBTX)) {
	e.t.Helper()
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(e.t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	res, err := store.MessageExtend(e.ctx, tx, q.ID, []store.Receipt{r}, time.Hour)
	require.NoError(e.t, err)
	require.True(e.t, res[0].OK)
	racer := e.newNamedPool(2, "racer")
	done := make(chan struct{})
	go func() {
		defer close(done)
		op(racer)
	}()
	e.activityWaitingEventually("racer")
	require.NoError(e.t, tx.Commit(e.ctx))
	<-done
}

// TestSettleRacingExtend: ack, nack, extend and purge of a message whose
// lease a concurrent extend just moved act on it (the receipt is still
// current: an extend keeps the claim token). A statement that found the
// row by its ctid and did not follow it to its new version answered
// "stale" and left the message to be delivered again.
func TestSettleRacingExtend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		op   func(e *env, q store.Queue, r store.Receipt, db store.DBTX)
		// live is how many messages the queue holds afterwards.
		live int64
	}{
		{"ack", func(e *env, q store.Queue, r store.Receipt, db store.DBTX) {
			res, _, err := store.MessageAck(e.ctx, db, q.ID, []store.Receipt{r})
			require.NoError(e.t, err)
			require.True(e.t, res[0].OK, "a current receipt acks")
		}, 0},
		{"ack_ungrouped", func(e *env, q store.Queue, r store.Receipt, db store.DBTX) {
			res, err := store.MessageAckUngrouped(e.ctx, db, q.ID, []store.Receipt{r})
			require.NoError(e.t, err)
			require.True(e.t, res[0].OK, "a current receipt acks")
		}, 0},
		{"nack", func(e *env, q store.Queue, r store.Receipt, db store.DBTX) {
			res, _, err := store.MessageNack(e.ctx, db, store.NackParams{Queue: q, Receipts: []store.Receipt{r}})
			require.NoError(e.t, err)
			require.True(e.t, res[0].OK, "a current receipt nacks")
		}, 1},
		{"nack_dead_letter", func(e *env, q store.Queue, r store.Receipt, db store.DBTX) {
			res, dead, err := store.MessageNack(e.ctx, db, store.NackParams{Queue: q, Receipts: []store.Receipt{r}, DeadLetter: true})
			require.NoError(e.t, err)
			require.True(e.t, res[0].OK, "a current receipt nacks")
			require.Equal(e.t, 1, dead)
		}, 0},
		{"extend", func(e *env, q store.Queue, r store.Receipt, db store.DBTX) {
			res, err := store.MessageExtend(e.ctx, db, q.ID, []store.Receipt{r}, 2*time.Hour)
			require.NoError(e.t, err)
			require.True(e.t, res[0].OK, "a current receipt extends")
		}, 1},
		{"purge", func(e *env, q store.Queue, _ store.Receipt, db store.DBTX) {
			require.NoError(e.t, store.MessagePurge(e.ctx, db.(store.TxBeginner), q.ID))
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, q := newQueueEnv(t, "q", store.QueuePatch{})
			e.send(q, msg(1))
			m := e.claim(q, 1, time.Minute)[0]
			e.raceWithExtend(q, m.Receipt, func(db store.DBTX) { tc.op(e, q, m.Receipt, db) })
			require.Equal(t, tc.live, e.live(q))
			e.requireCountersExact(q)
		})
	}
}
