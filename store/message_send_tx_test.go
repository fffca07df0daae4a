package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// sendTx runs MessageSendTx in a transaction of its own and commits it.
func (e *env) sendTx(q store.Queue, msgs ...store.SendMessage) (store.SendTxResult, error) {
	e.t.Helper()
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(e.t, err)
	defer tx.Rollback(e.ctx) //nolint:errcheck // a no-op after Commit
	res, sendErr := store.MessageSendTx(e.ctx, tx, q, msgs)
	require.NoError(e.t, tx.Commit(e.ctx))
	return res, sendErr
}

// TestMessageSendTxRolledBack: a send in a transaction that rolls back
// leaves nothing behind: no message, no dedup claim (the same dedup id is
// new afterwards), counters as they were. Inside the transaction the
// messages exist.
func TestMessageSendTxRolledBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, patch := range []store.QueuePatch{{}, {MaxDepth: ptr[int64](10)}} {
		name := "rolled-back"
		if patch.MaxDepth != nil {
			name += "-bounded"
		}
		q := e.queue(name, patch)
		e.send(q, msg(0))
		before := e.counts(q)
		slotsBefore := e.count(`SELECT count(*) FROM ferry.queue_counts WHERE queue_id = $1`, q.ID)

		tx, err := e.pool.Begin(e.ctx)
		require.NoError(t, err)
		res, err := store.MessageSendTx(e.ctx, tx, q, []store.SendMessage{
			msg(1), grouped("g", 2), deduped("d", 3), {Body: msg(4).Body, Delay: ptr(time.Hour)},
		})
		require.NoError(t, err)
		require.Len(t, res.Results, 4)
		require.Equal(t, []int64{q.ID}, res.Wake)
		var inside int64
		require.NoError(t, tx.QueryRow(e.ctx, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, q.ID).Scan(&inside))
		require.EqualValues(t, 5, inside, "the send is visible inside its transaction")
		require.NoError(t, tx.Rollback(e.ctx))

		require.EqualValues(t, 1, e.live(q))
		for _, r := range res.Results {
			require.Zero(t, e.count(`SELECT count(*) FROM ferry.messages WHERE id = $1`, r.ID))
		}
		require.Zero(t, e.count(`SELECT count(*) FROM ferry.dedup WHERE queue_id = $1`, q.ID))
		require.Equal(t, before, e.counts(q))
		require.Equal(t, slotsBefore, e.count(`SELECT count(*) FROM ferry.queue_counts WHERE queue_id = $1`, q.ID))
		e.requireCountersExact(q)
		again := e.send(q, deduped("d", 3))
		require.False(t, again[0].Duplicate, "the rolled-back dedup claim is gone")
	}
}

// TestMessageSendTxCommitted: committed, MessageSendTx is a REST send:
// the same batch answers the same way through it and through the Sender
// (duplicates of live and of repeated dedup ids, groups waiting behind
// their head, delays), and its dedup claims answer later sends.
func TestMessageSendTxCommitted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	viaSender := e.queue("via-sender", store.QueuePatch{})
	viaTx := e.queue("via-tx", store.QueuePatch{})
	batch := func() []store.SendMessage {
		return []store.SendMessage{
			deduped("live", 0), grouped("g", 1), grouped("g", 2), deduped("new", 3), deduped("new", 4),
			{Body: msg(5).Body, Delay: ptr(time.Hour)}, msg(6),
		}
	}
	liveSender := e.send(viaSender, deduped("live", -1))
	liveTx := e.send(viaTx, deduped("live", -1))

	want := e.send(viaSender, batch()...)
	got, err := e.sendTx(viaTx, batch()...)
	require.NoError(t, err)
	require.Equal(t, []int64{viaTx.ID}, got.Wake)
	require.Len(t, got.Results, len(want))
	for i := range want {
		require.Equal(t, want[i].Duplicate, got.Results[i].Duplicate, "message %d", i)
	}
	require.Equal(t, store.SendResult{ID: liveSender[0].ID, Duplicate: true}, want[0])
	require.Equal(t, store.SendResult{ID: liveTx[0].ID, Duplicate: true}, got.Results[0])
	require.Equal(t, store.SendResult{ID: got.Results[3].ID, Duplicate: true}, got.Results[4])

	require.Equal(t, e.counts(viaSender), e.counts(viaTx))
	require.EqualValues(t, 1, e.counts(viaTx).Delayed)
	for _, q := range []store.Queue{viaSender, viaTx} {
		var seqs []int
		for _, m := range e.claim(q, 10, time.Minute) {
			seqs = append(seqs, decode(t, m.Body).Seq)
		}
		// Group g's second message waits for its first; the delayed one
		// is not visible.
		require.ElementsMatch(t, []int{-1, 1, 3, 6}, seqs, "queue %s", q.Name)
		e.requireCountersExact(q)
	}

	// Its dedup claims are live: a REST send of the same id is a duplicate.
	again := e.send(viaTx, deduped("new", 7))
	require.Equal(t, store.SendResult{ID: got.Results[3].ID, Duplicate: true}, again[0])
}

// TestMessageSendTxRefused: the refusals of a REST send write nothing and
// leave the caller's transaction usable: max_depth (*QueueFullError, and
// *ValidationError for a batch that can never fit), a delay beyond the
// retention, a deleted queue (ErrNotFound).
func TestMessageSendTxRefused(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "bounded", store.QueuePatch{MaxDepth: ptr[int64](2), RetentionSeconds: ptr(3600)})
	_, err := e.sendTx(q, deduped("a", 1), msg(2))
	require.NoError(t, err)

	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer tx.Rollback(e.ctx) //nolint:errcheck // a no-op after Commit
	_, err = store.MessageSendTx(e.ctx, tx, q, []store.SendMessage{msg(3)})
	var full *store.QueueFullError
	require.ErrorAs(t, err, &full)
	require.Equal(t, store.QueueFullError{Depth: 2, MaxDepth: 2}, *full)
	_, err = store.MessageSendTx(e.ctx, tx, q, []store.SendMessage{msg(3), msg(4), msg(5)})
	var invalid *store.ValidationError
	require.ErrorAs(t, err, &invalid)
	require.Equal(t, "messages", invalid.Field)
	_, err = store.MessageSendTx(e.ctx, tx, q, []store.SendMessage{{Body: msg(6).Body, Delay: ptr(2 * time.Hour)}})
	require.ErrorAs(t, err, &invalid)
	require.Equal(t, "messages[0].delay_seconds", invalid.Field)
	// A duplicate takes no room, also at max_depth.
	res, err := store.MessageSendTx(e.ctx, tx, q, []store.SendMessage{deduped("a", 7)})
	require.NoError(t, err)
	require.True(t, res.Results[0].Duplicate)
	var inside int64
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, q.ID).Scan(&inside))
	require.EqualValues(t, 2, inside)
	require.NoError(t, tx.Commit(e.ctx))
	require.EqualValues(t, 2, e.live(q))
	e.requireCountersExact(q)

	gone := e.queue("gone", store.QueuePatch{})
	_, err = store.QueueDelete(e.ctx, e.pool, gone.Name)
	require.NoError(t, err)
	_, err = e.sendTx(gone, msg(1))
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = e.sendTx(gone, deduped("x", 1), grouped("g", 2))
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, gone.ID))
}
