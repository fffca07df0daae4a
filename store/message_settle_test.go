package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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

// TestAckExpiredReceiptRacingClaim: an ack whose receipt's lease ran out
// (which applies while nobody received the message again) racing a
// consumer that claims the message again: exactly one of them has it,
// either the ack deleted it and the claim got nothing, or the claim holds
// it (its receipt acks) and the ack was stale. Never both: a message
// deleted while a new lease of it was handed out. The first three cases
// force each interleaving (the loser waits for, or skips, the winner's
// uncommitted change); the last lets them run free.
func TestAckExpiredReceiptRacingClaim(t *testing.T) {
	t.Parallel()
	// expired sends a message and claims it with a lease that runs out.
	expired := func(e *env, q store.Queue) store.Message {
		m := e.sendClaimed(q, msg(1), 50*time.Millisecond)[0]
		e.waitVisible(q, m.ID)
		return m
	}
	// requireClaimWon checks that the claim holds the message: acked
	// with the claim's receipt, not with the old one.
	requireClaimWon := func(e *env, q store.Queue, old store.Receipt, got []store.Message) {
		e.t.Helper()
		require.Len(e.t, got, 1, "the claim got the message")
		require.Equal(e.t, 1, int(e.live(q)))
		require.Equal(e.t, got[0].Receipt.Token, *e.claimState(q, got[0].ID).ClaimToken, "the row carries the new claim")
		require.Equal(e.t, []bool{false}, e.ack(q, old), "the old receipt after the new claim")
		require.Equal(e.t, []bool{true}, e.ack(q, got[0].Receipt), "the new claim's receipt")
	}

	t.Run("ClaimCommitsFirst", func(t *testing.T) {
		t.Parallel()
		e, q := newQueueEnv(t, "q", store.QueuePatch{})
		m := expired(e, q)
		tx, err := e.pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(e.ctx) }()
		got, _, err := store.MessageClaim(e.ctx, tx, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
		require.NoError(t, err)
		racer := e.newNamedPool(2, "racer")
		done := make(chan []store.ReceiptResult, 1)
		go func() {
			res, _, err := store.MessageAck(e.ctx, racer, q.ID, []store.Receipt{m.Receipt})
			assert.NoError(t, err)
			done <- res
		}()
		e.activityWaitingEventually("racer")
		require.NoError(t, tx.Commit(e.ctx))
		res := <-done
		require.Len(t, res, 1)
		require.False(t, res[0].OK, "the ack deleted a message a claim holds")
		requireClaimWon(e, q, m.Receipt, got)
		e.requireCountersExact(q)
	})

	t.Run("ClaimRollsBack", func(t *testing.T) {
		t.Parallel()
		e, q := newQueueEnv(t, "q", store.QueuePatch{})
		m := expired(e, q)
		tx, err := e.pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(e.ctx) }()
		got, _, err := store.MessageClaim(e.ctx, tx, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
		require.NoError(t, err)
		require.Len(t, got, 1)
		racer := e.newNamedPool(2, "racer")
		done := make(chan []store.ReceiptResult, 1)
		go func() {
			res, _, err := store.MessageAck(e.ctx, racer, q.ID, []store.Receipt{m.Receipt})
			assert.NoError(t, err)
			done <- res
		}()
		e.activityWaitingEventually("racer")
		require.NoError(t, tx.Rollback(e.ctx))
		res := <-done
		require.Len(t, res, 1)
		require.True(t, res[0].OK, "the claim that took the message never happened: the expired receipt acks")
		require.Zero(t, e.live(q))
		e.requireCountersExact(q)
	})

	t.Run("AckCommitsFirst", func(t *testing.T) {
		t.Parallel()
		e, q := newQueueEnv(t, "q", store.QueuePatch{})
		m := expired(e, q)
		tx, err := e.pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(e.ctx) }()
		res, _, err := store.MessageAck(e.ctx, tx, q.ID, []store.Receipt{m.Receipt})
		require.NoError(t, err)
		require.True(t, res[0].OK, "an expired receipt of a message nobody received again acks")
		// The claim skips the row the ack holds locked.
		got := e.claim(q, 1, time.Minute)
		require.Empty(t, got, "a claim got a message an ack is deleting")
		require.NoError(t, tx.Commit(e.ctx))
		require.Zero(t, e.live(q))
		require.Empty(t, e.claim(q, 1, time.Minute), "the acked message was delivered again")
		e.requireCountersExact(q)
	})

	t.Run("Free", func(t *testing.T) {
		t.Parallel()
		e, q := newQueueEnv(t, "q", store.QueuePatch{})
		acked := 0
		for range 40 {
			m := expired(e, q)
			var (
				wg               sync.WaitGroup
				start            = make(chan struct{})
				res              []store.ReceiptResult
				got              []store.Message
				ackErr, claimErr error
			)
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				res, _, ackErr = store.MessageAck(e.ctx, e.pool, q.ID, []store.Receipt{m.Receipt})
			}()
			go func() {
				defer wg.Done()
				<-start
				got, _, claimErr = store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
			}()
			close(start)
			wg.Wait()
			require.NoError(t, ackErr)
			require.NoError(t, claimErr)
			if res[0].OK {
				acked++
				require.Empty(t, got, "the ack deleted the message and the claim got it too")
				require.Zero(t, e.live(q))
			} else {
				requireClaimWon(e, q, m.Receipt, got)
			}
		}
		t.Logf("the ack won %d of 40 races", acked)
		e.requireCountersExact(q)
	})
}

// A settle locks its messages in id order, whatever order its receipts
// come in, so it never holds one while it waits for another that a
// second transaction holds before wanting the first: here a transaction
// holds the smaller id, an ack lists the larger first and waits, and the
// holder can still lock the larger one at once (a settle that locked in
// the receipts' order would hold it, and PostgreSQL would abort one of
// the two as a deadlock). Then both acks take effect.
func TestSettleLocksInIDOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("ordered-locks", store.QueuePatch{})
	e.send(q, msg(1), msg(2))
	got := e.claim(q, 2, time.Minute)
	require.Len(t, got, 2)
	small, large := got[0], got[1]
	if large.ID < small.ID {
		small, large = large, small
	}

	holder, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(e.ctx) }()
	_, err = holder.Exec(e.ctx, `SELECT FROM ferry.messages WHERE queue_id = $1 AND id = $2 FOR UPDATE`, q.ID, small.ID)
	require.NoError(t, err)

	acker := e.newNamedPool(2, "ordered-acker")
	acked := inBackground(func(time.Time) error {
		res, _, err := store.MessageAck(e.ctx, acker, q.ID, []store.Receipt{large.Receipt, small.Receipt})
		if err == nil && (!res[0].OK || !res[1].OK) {
			t.Errorf("acks: %+v", res)
		}
		return err
	})
	e.activityWaitingEventually("ordered-acker")
	// NOWAIT: a settle that held it would make this wait, and then lose
	// the deadlock (its retry would hide that).
	_, err = holder.Exec(e.ctx, `SELECT FROM ferry.messages WHERE queue_id = $1 AND id = $2 FOR UPDATE NOWAIT`, q.ID, large.ID)
	require.NoError(t, err, "the ack waits holding nothing: the larger id is free")
	require.NoError(t, holder.Commit(e.ctx))
	require.NoError(t, <-acked)
	require.Zero(t, e.live(q))
	e.requireCountersExact(q)
}
