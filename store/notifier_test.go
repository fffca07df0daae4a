package store_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// runNotifier starts a Notifier and stops it at cleanup.
func (e *env) runNotifier(pool *pgxpool.Pool) *store.Notifier {
	n := store.NewNotifier(pool, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return n
}

// activityEventually waits until appName has sessions whose last statement
// matches the LIKE pattern and that are idle now (at least want of them).
func (e *env) activityEventually(appName, pattern string, want int) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		var n int
		err := e.pool.QueryRow(e.ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND query LIKE $2 AND state = 'idle'`,
			appName, pattern).Scan(&n)
		return err == nil && n >= want
	}, 10*time.Second, 5*time.Millisecond, "no idle %s session ran %q", appName, pattern)
}

type received struct {
	msgs    []store.Message
	err     error
	elapsed time.Duration
}

// requireSendWakes sends one message to q and requires that the receive
// waiting on out returns just that message, within 2 seconds of the send.
func requireSendWakes(t *testing.T, e *env, sender *store.Sender, q store.Queue, out <-chan received, msgAndArgs ...any) {
	t.Helper()
	sentAt := time.Now()
	res, _, err := sender.Send(e.ctx, q.Name, []store.SendMessage{msg(1)})
	require.NoError(t, err)
	r := <-out
	require.NoError(t, r.err)
	require.Equal(t, []int64{res[0].ID}, ids(r.msgs))
	require.Less(t, time.Since(sentAt), 2*time.Second, msgAndArgs...)
}

// receiveAsync starts a MessageReceive and returns where its outcome will
// arrive.
func receiveAsync(ctx context.Context, db store.DBTX, n *store.Notifier, p store.ReceiveParams) <-chan received {
	return inBackground(func(start time.Time) received {
		msgs, _, err := store.MessageReceive(ctx, db, n, p)
		return received{msgs, err, time.Since(start)}
	})
}

func TestReceiveLongPoll(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*env, store.Queue, *pgxpool.Pool) {
		e := newEnv(t)
		// The receiver has a pool of its own, so that the test can see in
		// pg_stat_activity when its first claim has run.
		return e, e.queue("poll", store.QueuePatch{}), e.newNamedPool(4, "receiver")
	}
	// Only a wake can end these waits in time: no fallback poll happens
	// within the wait.
	params := func(q store.Queue) store.ReceiveParams {
		return store.ReceiveParams{
			ClaimParams:  store.ClaimParams{Queue: q, Max: 10, VisibilityTimeout: time.Minute},
			Wait:         5 * time.Second,
			FallbackPoll: 10 * time.Second,
		}
	}

	t.Run("WokenByNotify", func(t *testing.T) {
		// The sender announces through its own Notifier; the receiver's
		// Notifier hears of it only through Postgres NOTIFY.
		t.Parallel()
		e, q, recvPool := setup(t)
		recvNotifier := e.runNotifier(recvPool)
		sendNotifier := e.runNotifier(e.pool)
		sender := e.newSender(store.SenderConfig{Committed: sendNotifier.Published})
		other := e.queue("other", store.QueuePatch{})

		e.activityEventually("receiver", "LISTEN %", 1)
		out := receiveAsync(e.ctx, recvPool, recvNotifier, params(q))
		e.activityEventually("receiver", "%ferry:message_claim%", 1)

		// A send to another queue does not end the wait.
		_, _, err := sender.Send(e.ctx, other.Name, []store.SendMessage{msg(0)})
		require.NoError(t, err)

		requireSendWakes(t, e, sender, q, out, "woken by NOTIFY, not by a poll")
	})

	t.Run("WokenLocally", func(t *testing.T) {
		// One instance: the Sender's Committed wakes the waiter directly,
		// without the Notifier running at all.
		t.Parallel()
		e, q, recvPool := setup(t)
		n := store.NewNotifier(recvPool, 10*time.Millisecond, slog.New(slog.DiscardHandler))
		sender := e.newSender(store.SenderConfig{Committed: n.Published})

		out := receiveAsync(e.ctx, recvPool, n, params(q))
		e.activityEventually("receiver", "%ferry:message_claim%", 1)
		requireSendWakes(t, e, sender, q, out)
	})

	t.Run("ManyWaiters", func(t *testing.T) {
		// Several receivers wait on one queue; as many messages arrive.
		// Each message is received once and every receiver gets one.
		t.Parallel()
		e, q, recvPool := setup(t)
		n := store.NewNotifier(recvPool, 10*time.Millisecond, slog.New(slog.DiscardHandler))
		sender := e.newSender(store.SenderConfig{Committed: n.Published})
		const waiters = 4
		p := params(q)
		p.Max = 1
		p.FallbackPoll = 50 * time.Millisecond // a woken loser must look again soon
		outs := make([]<-chan received, waiters)
		for i := range outs {
			outs[i] = receiveAsync(e.ctx, recvPool, n, p)
		}
		var batch []store.SendMessage
		for i := range waiters {
			batch = append(batch, msg(i))
		}
		_, _, err := sender.Send(e.ctx, q.Name, batch)
		require.NoError(t, err)
		seen := map[int64]bool{}
		for _, out := range outs {
			r := <-out
			require.NoError(t, r.err)
			require.Len(t, r.msgs, 1)
			require.False(t, seen[r.msgs[0].ID])
			seen[r.msgs[0].ID] = true
		}
	})

	t.Run("FallbackPollFindsDelayed", func(t *testing.T) {
		// A delayed message becomes visible by time alone: no send wakes
		// anyone, the fallback poll finds it.
		t.Parallel()
		e, q, recvPool := setup(t)
		n := store.NewNotifier(recvPool, 10*time.Millisecond, slog.New(slog.DiscardHandler))
		res := e.send(q, store.SendMessage{Body: body(t, payload{}), Delay: ptr(300 * time.Millisecond)})
		p := params(q)
		p.FallbackPoll = 50 * time.Millisecond
		r := <-receiveAsync(e.ctx, recvPool, n, p)
		require.NoError(t, r.err)
		require.Equal(t, []int64{res[0].ID}, ids(r.msgs))
		require.Less(t, r.elapsed, 4*time.Second)
	})

	t.Run("EmptyAfterWait", func(t *testing.T) {
		t.Parallel()
		e, q, recvPool := setup(t)
		n := store.NewNotifier(recvPool, 10*time.Millisecond, slog.New(slog.DiscardHandler))
		p := params(q)
		p.Wait = 300 * time.Millisecond
		p.FallbackPoll = 50 * time.Millisecond
		r := <-receiveAsync(e.ctx, recvPool, n, p)
		require.NoError(t, r.err)
		require.Empty(t, r.msgs)
		require.GreaterOrEqual(t, r.elapsed, 300*time.Millisecond, "waited the whole wait")
	})

	t.Run("Stop", func(t *testing.T) {
		t.Parallel()
		e, q, recvPool := setup(t)
		n := store.NewNotifier(recvPool, 10*time.Millisecond, slog.New(slog.DiscardHandler))
		stop := make(chan struct{})
		p := params(q)
		p.Stop = stop
		out := receiveAsync(e.ctx, recvPool, n, p)
		e.activityEventually("receiver", "%ferry:message_claim%", 1)
		close(stop)
		r := <-out
		require.NoError(t, r.err)
		require.Empty(t, r.msgs)
		require.Less(t, r.elapsed, 4*time.Second, "stop ends the wait")
	})
}

// TestNotifierListenerReconnectsPromptly: each time its LISTEN connection
// is cut (here by pg_terminate_backend; in production by a restart or a
// failover of the database), the Notifier is listening again within about
// a second, however often it happened before: the backoff starts afresh
// after every connection that worked.
func TestNotifierListenerReconnectsPromptly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runNotifier(e.newNamedPool(2, "relisten"))
	listener := func() (pid int) {
		err := e.pool.QueryRow(e.ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'relisten'
				AND query = 'LISTEN ferry_messages'`).Scan(&pid)
		if err != nil {
			return 0
		}
		return pid
	}
	for i := range 7 {
		var pid int
		require.Eventually(t, func() bool { pid = listener(); return pid != 0 }, 10*time.Second, 5*time.Millisecond)
		cut := time.Now()
		_, err := e.pool.Exec(e.ctx, `SELECT pg_terminate_backend($1, 5000)`, pid)
		require.NoError(t, err)
		require.Eventually(t, func() bool { p := listener(); return p != 0 && p != pid }, 10*time.Second, 5*time.Millisecond)
		took := time.Since(cut)
		require.Less(t, took, 1500*time.Millisecond, "cut %d: listening again after %s", i+1, took)
	}
}

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
