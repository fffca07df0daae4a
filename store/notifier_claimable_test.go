package store_test

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestSettleWakes holds the store's rule of which settlements wake a
// queue's long polls and push workers (and kick this instance's push
// delivery, OnClaimable), and which do not.
func TestSettleWakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := store.NewNotifier(e.pool, 0, slog.New(slog.DiscardHandler))
	var kicked []int64
	n.OnClaimable(func(ids []int64) { kicked = append(kicked, ids...) })
	q := e.queue("wakes", store.QueuePatch{})
	body := json.RawMessage(`1`)

	// check runs write and requires that it woke q (and kicked it) or not.
	check := func(what string, want bool, write func()) {
		t.Helper()
		kicked = nil
		ch := n.Wait(q.ID)
		write()
		require.Equal(t, want, isDone(ch), "%s: woken", what)
		if want {
			require.Equal(t, []int64{q.ID}, kicked, "%s: kicked", what)
		} else {
			require.Empty(t, kicked, "%s: kicked", what)
		}
	}
	nack := func(p store.NackParams) {
		p.Queue = q
		res, _, err := store.MessageNackAndWake(e.ctx, e.pool, n, p)
		require.NoError(t, err)
		require.Equal(t, []bool{true}, oks(res))
	}
	ack := func(r store.Receipt) {
		res, err := store.MessageAckAndWake(e.ctx, e.pool, n, q.ID, []store.Receipt{r})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, oks(res))
	}

	e.send(q, store.SendMessage{Body: body})
	m := e.claim(q, 1, time.Minute)[0]
	check("a nack with a delay", false, func() { nack(store.NackParams{Receipts: []store.Receipt{m.Receipt}, Delay: ptr(time.Hour)}) })
	_, err := e.pool.Exec(e.ctx, `UPDATE ferry.messages SET visible_at = now() WHERE queue_id = $1`, q.ID)
	require.NoError(t, err)
	m = e.claim(q, 1, time.Minute)[0]
	check("a nack without delay", true, func() { nack(store.NackParams{Receipts: []store.Receipt{m.Receipt}, Delay: ptr(time.Duration(0))}) })
	check("a stale nack without delay", false, func() {
		res, _, err := store.MessageNackAndWake(e.ctx, e.pool, n, store.NackParams{Queue: q, Receipts: []store.Receipt{m.Receipt}, Delay: ptr(time.Duration(0))})
		require.NoError(t, err)
		require.Equal(t, []bool{false}, oks(res))
	})
	m = e.claim(q, 1, time.Minute)[0]
	check("an ack of an ungrouped message", false, func() { ack(m.Receipt) })

	e.send(q, store.SendMessage{Body: body, Group: "g"}, store.SendMessage{Body: body, Group: "g"}, store.SendMessage{Body: body, Group: "g"})
	m = e.claim(q, 1, time.Minute)[0]
	check("an ack promoting a group's next", true, func() { ack(m.Receipt) })
	m = e.claim(q, 1, time.Minute)[0]
	check("a nack dead-lettering a group's head", true, func() { nack(store.NackParams{Receipts: []store.Receipt{m.Receipt}, DeadLetter: true}) })

	redrive := func(want int) func() {
		return func() {
			got, err := store.DeadLetterRedriveAndWake(e.ctx, e.pool, n, store.RedriveParams{QueueID: q.ID, Limit: 10})
			require.NoError(t, err)
			require.Equal(t, want, got)
		}
	}
	check("a redrive", true, redrive(1))
	check("a redrive of nothing", false, redrive(0))

	var nilNotifier *store.Notifier
	nilNotifier.Claimable(q.ID) // wakes nothing, and does not panic
}
