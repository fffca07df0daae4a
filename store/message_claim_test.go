package store_test

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// lease is short so that tests can watch leases run out.
const lease = 200 * time.Millisecond

// claimState is the part of a message row a receipt operation may change.
type claimState struct {
	VisibleAt    time.Time
	ReceiveCount int
	ClaimToken   *int64
	LastError    *string
}

func (e *env) claimState(q store.Queue, id int64) claimState {
	e.t.Helper()
	var s claimState
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `
		SELECT visible_at, receive_count, claim_token, last_error FROM ferry.messages WHERE queue_id = $1 AND id = $2`,
		q.ID, id).Scan(&s.VisibleAt, &s.ReceiveCount, &s.ClaimToken, &s.LastError))
	return s
}

// Invariant 3: an ack, nack or extend with a stale receipt changes nothing.
// (An ack needs only the receipt's claim token on the row; nack and
// extend need a live lease too.)
func TestStaleReceipts(t *testing.T) {
	t.Parallel()
	setup := queueSetup("stale", store.QueuePatch{MaxReceives: ptr(100)})
	// requireAllStale tries every operation with r and checks that the
	// message row did not change.
	requireAllStale := func(t *testing.T, e *env, q store.Queue, r store.Receipt) {
		t.Helper()
		before := e.claimState(q, r.MessageID)
		require.Equal(t, []bool{false}, e.ack(q, r), "ack")
		require.Equal(t, []bool{false}, e.extend(q, time.Hour, r), "extend")
		res, dead := e.nack(store.NackParams{Queue: q, Receipts: []store.Receipt{r}, Delay: ptr(time.Hour), Error: ptr("stale nack")})
		require.Equal(t, []bool{false}, res, "nack")
		require.Zero(t, dead)
		res, dead = e.nack(store.NackParams{Queue: q, Receipts: []store.Receipt{r}, DeadLetter: true})
		require.Equal(t, []bool{false}, res, "nack dead_letter")
		require.Zero(t, dead)
		require.Equal(t, before, e.claimState(q, r.MessageID), "a stale receipt changed the message")
		require.Zero(t, e.deadLetters(q))
	}

	t.Run("ExpiredAndReclaimed", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		first := e.sendClaimed(q, msg(1), lease)
		second := e.claimEventually(q, 1, time.Minute)
		require.Equal(t, first[0].ID, second[0].ID)
		require.Equal(t, 2, second[0].ReceiveCount)
		require.NotEqual(t, first[0].Receipt, second[0].Receipt)

		requireAllStale(t, e, q, first[0].Receipt)

		// The new claim's receipt still works, once.
		require.Equal(t, []bool{true}, e.extend(q, time.Minute, second[0].Receipt))
		require.Equal(t, []bool{true}, e.ack(q, second[0].Receipt))
		require.Equal(t, []bool{false}, e.ack(q, second[0].Receipt), "second ack")
		require.Equal(t, []bool{false}, e.extend(q, time.Minute, second[0].Receipt))
		res, _ := e.nack(store.NackParams{Queue: q, Receipts: []store.Receipt{second[0].Receipt}, Delay: ptr(time.Duration(0))})
		require.Equal(t, []bool{false}, res)
		require.Zero(t, e.live(q))
		require.Zero(t, e.deadLetters(q))
		e.requireCountersExact(q)
	})

	t.Run("ExpiredNotReclaimed", func(t *testing.T) {
		// A lease that ran out no longer holds the message, so nack and
		// extend are stale; an ack still deletes it while nobody received
		// it again (SQS's DeleteMessage after the visibility timeout).
		t.Parallel()
		e, q := setup(t)
		got := e.sendClaimed(q, msg(1), lease)
		e.waitVisible(q, got[0].ID)
		before := e.claimState(q, got[0].ID)
		require.Equal(t, []bool{false}, e.extend(q, time.Hour, got[0].Receipt), "extend")
		res, dead := e.nack(store.NackParams{Queue: q, Receipts: receipts(got), Delay: ptr(time.Hour), Error: ptr("late nack")})
		require.Equal(t, []bool{false}, res, "nack")
		require.Zero(t, dead)
		require.Equal(t, before, e.claimState(q, got[0].ID), "a stale nack or extend changed the message")
		require.Equal(t, []bool{true}, e.ack(q, got[0].Receipt), "ack after the lease ran out")
		require.Zero(t, e.live(q))
		require.Empty(t, e.claim(q, 1, time.Minute), "the acked message was delivered again")
		require.Equal(t, []bool{false}, e.ack(q, got[0].Receipt), "second ack")
		e.requireCountersExact(q)
	})

	t.Run("ExpiredGroupHead", func(t *testing.T) {
		// Acking a group's head after its lease ran out promotes the
		// group's next message, as an ack in time does.
		t.Parallel()
		e, q := setup(t)
		e.send(q, grouped("g", 1), grouped("g", 2))
		head := e.claimOne(q, lease)
		e.waitVisible(q, head[0].ID)
		require.Equal(t, []bool{true}, e.ack(q, head[0].Receipt))
		next := e.claimOne(q, time.Minute)
		require.NotEqual(t, head[0].ID, next[0].ID)
		require.JSONEq(t, `{"g":"g","seq":2}`, string(next[0].Body))
		require.Equal(t, 1, next[0].ReceiveCount)
		require.Equal(t, []bool{true}, e.ack(q, next[0].Receipt))
		require.Zero(t, e.live(q))
		e.requireCountersExact(q)
	})

	t.Run("Nack", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		got := e.sendClaimed(q, msg(1), time.Minute)
		res, dead := e.nack(store.NackParams{Queue: q, Receipts: receipts(got), Delay: ptr(time.Hour), Error: ptr("first")})
		require.Equal(t, []bool{true}, res)
		require.Zero(t, dead)
		require.Nil(t, e.claimState(q, got[0].ID).ClaimToken)

		requireAllStale(t, e, q, got[0].Receipt)
		require.Equal(t, "first", *e.claimState(q, got[0].ID).LastError)
		require.Empty(t, e.claim(q, 1, time.Minute), "nack delay holds")
	})

	t.Run("NackThenReclaim", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		e.send(q, msg(1))
		first := e.claim(q, 1, time.Minute)
		res, _ := e.nack(store.NackParams{Queue: q, Receipts: receipts(first), Delay: ptr(time.Duration(0))})
		require.Equal(t, []bool{true}, res)
		second := e.claimOne(q, time.Minute)
		requireAllStale(t, e, q, first[0].Receipt)
		require.Equal(t, []bool{true}, e.ack(q, second[0].Receipt))
	})

	t.Run("Purge", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		e.send(q, msg(1), msg(2), grouped("g", 3), grouped("g", 4), store.SendMessage{Body: body(t, payload{Seq: 5}), Delay: ptr(time.Hour)})
		got := e.claim(q, 10, time.Minute)
		require.Len(t, got, 3)
		require.NoError(t, store.MessagePurge(e.ctx, e.pool, q.ID))
		require.Zero(t, e.live(q))
		require.Equal(t, []bool{false, false, false}, e.ack(q, receipts(got)...))
		require.Equal(t, []bool{false, false, false}, e.extend(q, time.Minute, receipts(got)...))
		res, dead := e.nack(store.NackParams{Queue: q, Receipts: receipts(got), DeadLetter: true})
		require.Equal(t, []bool{false, false, false}, res)
		require.Zero(t, dead)
		require.Zero(t, e.deadLetters(q))
		require.Equal(t, store.QueueStats{}, e.stats(q))
		e.requireCountersExact(q)

		// The group is usable again after a purge.
		e.send(q, grouped("g", 6))
		again := e.claim(q, 10, time.Minute)
		require.Len(t, again, 1)
	})

	t.Run("ForeignAndForged", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		other := e.queue("other", store.QueuePatch{})
		got := e.sendClaimed(q, msg(1), time.Minute)
		r := got[0].Receipt

		before := e.claimState(q, r.MessageID)
		// The right receipt against another queue.
		res, _, err := store.MessageAck(e.ctx, e.pool, other.ID, []store.Receipt{r})
		require.NoError(t, err)
		require.Equal(t, []bool{false}, oks(res))
		res, _, err = store.MessageNack(e.ctx, e.pool, store.NackParams{Queue: other, Receipts: []store.Receipt{r}, DeadLetter: true})
		require.NoError(t, err)
		require.Equal(t, []bool{false}, oks(res))
		// Forged tokens and ids.
		requireAllStaleOK := func(r store.Receipt) {
			require.Equal(t, []bool{false}, e.ack(q, r))
			require.Equal(t, []bool{false}, e.extend(q, time.Hour, r))
		}
		requireAllStaleOK(store.Receipt{MessageID: r.MessageID, Token: r.Token + 1})
		requireAllStaleOK(store.Receipt{MessageID: r.MessageID, Token: 0})
		requireAllStaleOK(store.Receipt{MessageID: r.MessageID + 1, Token: r.Token})
		require.Equal(t, before, e.claimState(q, r.MessageID))

		// The receipt survives its string form.
		parsed, err := store.ParseReceipt(r.String())
		require.NoError(t, err)
		require.Equal(t, r, parsed)
		require.Equal(t, []bool{true}, e.ack(q, parsed))
	})

	t.Run("MixedBatch", func(t *testing.T) {
		// One call with current and stale receipts applies only the current
		// ones, reported in request order.
		t.Parallel()
		e, q := setup(t)
		e.send(q, msg(1), msg(2), msg(3))
		got := e.claim(q, 3, time.Minute)
		require.Len(t, got, 3)
		require.Equal(t, []bool{true}, e.ack(q, got[1].Receipt))
		require.Equal(t, []bool{true, false, true}, e.ack(q, receipts(got)...))
		require.Zero(t, e.live(q))
	})

	t.Run("ExtendKeepsLease", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		got := e.sendClaimed(q, msg(1), lease)
		require.Equal(t, []bool{true}, e.extend(q, time.Hour, got[0].Receipt))
		require.Greater(t, time.Until(e.claimState(q, got[0].ID).VisibleAt), 50*time.Minute)
		require.Empty(t, e.claim(q, 1, time.Minute), "an extended lease hides the message")
		require.Equal(t, []bool{true}, e.ack(q, got[0].Receipt))
	})

	t.Run("RacingAcks", func(t *testing.T) {
		// Many goroutines ack the same receipts at once: each message is
		// acked (reported ok) exactly once.
		t.Parallel()
		e, q := setup(t)
		for i := range 20 {
			e.send(q, msg(i))
		}
		got := e.claim(q, 20, time.Minute)
		require.Len(t, got, 20)
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			oks = map[int64]int{}
		)
		for range 8 {
			wg.Go(func() {
				res, _, err := store.MessageAck(e.ctx, e.pool, q.ID, receipts(got))
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, r := range res {
					if r.OK {
						oks[r.Receipt.MessageID]++
					}
				}
			})
		}
		wg.Wait()
		require.Len(t, oks, 20)
		for id, n := range oks {
			require.Equal(t, 1, n, "message %d acked %d times", id, n)
		}
		require.Zero(t, e.live(q))
		e.requireCountersExact(q)
	})
}

// assertNoError reports err as a test failure from any goroutine.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

// Invariant 2: an unacked message comes back when its lease expires, each
// claim counts, and past max_receives it is dead-lettered with its last
// error instead of delivered again.
func TestLeaseExpiryAndMaxReceives(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T, maxReceives int) (*env, store.Queue) {
		e := newEnv(t)
		return e, e.queue("leases", store.QueuePatch{MaxReceives: ptr(maxReceives)})
	}

	t.Run("ExpiryDeadLetters", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t, 3)
		res := e.send(q, msg(1))
		id := res[0].ID

		// Receive 1 expires; receive 2 is nacked with an error; receive 3
		// expires again.
		got := e.claim(q, 10, lease)
		require.Len(t, got, 1)
		require.Equal(t, 1, got[0].ReceiveCount)
		require.Empty(t, e.claim(q, 10, lease), "hidden while leased")

		got = e.claimEventually(q, 10, lease)
		require.Equal(t, id, got[0].ID)
		require.Equal(t, 2, got[0].ReceiveCount)
		r, dead := e.nack(store.NackParams{Queue: q, Receipts: receipts(got), Delay: ptr(time.Duration(0)), Error: ptr("boom 2")})
		require.Equal(t, []bool{true}, r)
		require.Zero(t, dead)

		got = e.claim(q, 10, lease)
		require.Len(t, got, 1, "nack with delay 0 is visible at once")
		require.Equal(t, 3, got[0].ReceiveCount)

		// The fourth claim must not deliver: it dead-letters instead.
		var deadTotal int
		require.Eventually(t, func() bool {
			msgs, d, err := store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: q, Max: 10, VisibilityTimeout: lease})
			if err != nil || len(msgs) > 0 {
				t.Errorf("claim after max_receives: %v, %d messages (receive_count %v)", err, len(msgs), msgs)
				return true
			}
			deadTotal += d
			return deadTotal > 0
		}, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, 1, deadTotal)
		require.Zero(t, e.live(q))

		dls, more, err := store.DeadLetterList(e.ctx, e.pool, q.ID, 0, 10)
		require.NoError(t, err)
		require.False(t, more)
		require.Len(t, dls, 1)
		require.Equal(t, id, dls[0].ID)
		require.Equal(t, 3, dls[0].ReceiveCount, "receive_count = max_receives")
		require.NotNil(t, dls[0].LastError)
		require.Equal(t, "boom 2", *dls[0].LastError, "the last nack's error is kept")
		require.JSONEq(t, `{"seq":1}`, string(dls[0].Body))
		e.requireCountersExact(q)
	})

	t.Run("NackOnLastReceive", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t, 2)
		e.send(q, msg(1))
		got := e.claim(q, 1, time.Minute)
		r, dead := e.nack(store.NackParams{Queue: q, Receipts: receipts(got), Delay: ptr(time.Duration(0)), Error: ptr("first")})
		require.Equal(t, []bool{true}, r)
		require.Zero(t, dead)
		got = e.claim(q, 1, time.Minute)
		require.Len(t, got, 1)
		require.Equal(t, 2, got[0].ReceiveCount)
		r, dead = e.nack(store.NackParams{Queue: q, Receipts: receipts(got), Delay: ptr(time.Duration(0)), Error: ptr("final")})
		require.Equal(t, []bool{true}, r)
		require.Equal(t, 1, dead, "the last allowed receive's nack dead-letters at once")
		require.Zero(t, e.live(q))
		require.Equal(t, []bool{false}, e.ack(q, got[0].Receipt))
		dls, _, err := store.DeadLetterList(e.ctx, e.pool, q.ID, 0, 10)
		require.NoError(t, err)
		require.Len(t, dls, 1)
		require.Equal(t, 2, dls[0].ReceiveCount)
		require.Equal(t, "final", *dls[0].LastError)
	})

	t.Run("NackDeadLetter", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t, 5)
		e.send(q, msg(1), msg(2))
		got := e.claim(q, 2, time.Minute)
		require.Len(t, got, 2)
		r, dead := e.nack(store.NackParams{Queue: q, Receipts: receipts(got[:1]), DeadLetter: true, Error: ptr("permanent")})
		require.Equal(t, []bool{true}, r)
		require.Equal(t, 1, dead)
		dls, _, err := store.DeadLetterList(e.ctx, e.pool, q.ID, 0, 10)
		require.NoError(t, err)
		require.Len(t, dls, 1)
		require.Equal(t, got[0].ID, dls[0].ID)
		require.Equal(t, 1, dls[0].ReceiveCount)
		require.Equal(t, "permanent", *dls[0].LastError)
		require.Equal(t, []bool{true}, e.ack(q, got[1].Receipt), "the other message is untouched")
		e.requireCountersExact(q)
	})

	t.Run("ManyExhaustedFillBatch", func(t *testing.T) {
		// A run of exhausted messages in front of deliverable ones: the
		// claim dead-letters them and still returns the deliverable ones,
		// never an exhausted one.
		t.Parallel()
		e, q := setup(t, 1)
		var poison []store.SendMessage
		for i := range 6 {
			poison = append(poison, msg(i))
		}
		e.send(q, poison...)
		got := e.claim(q, 6, lease)
		require.Len(t, got, 6)
		for _, m := range got {
			e.waitVisible(q, m.ID)
		}
		fresh := e.send(q, msg(100), msg(101))
		msgs, dead, err := store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: q, Max: 4, VisibilityTimeout: time.Minute})
		require.NoError(t, err)
		require.Equal(t, 6, dead)
		require.Equal(t, resultIDs(fresh), ids(msgs))
		for _, m := range msgs {
			require.Equal(t, 1, m.ReceiveCount)
		}
		require.EqualValues(t, 6, e.deadLetters(q))
		e.requireCountersExact(q)
	})

	t.Run("ConcurrentClaimers", func(t *testing.T) {
		// Many claimers on expiring leases: a message is never held by two
		// claims at once, every claim bumps receive_count by one, and each
		// message ends dead-lettered with receive_count = max_receives.
		t.Parallel()
		const maxReceives = 3
		e, q := setup(t, maxReceives)
		const n = 30
		var batch []store.SendMessage
		for i := range n {
			batch = append(batch, msg(i))
		}
		e.send(q, batch...)

		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			counts   = map[int64][]int{}
			dead     int
			deadline = time.Now().Add(20 * time.Second)
		)
		for range 6 {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					msgs, d, err := store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: q, Max: 4, VisibilityTimeout: 50 * time.Millisecond})
					if !assertNoError(t, err) {
						return
					}
					if len(msgs) == 0 && d == 0 {
						pause(5 * time.Millisecond) // poll interval while leases run
					}
					mu.Lock()
					dead += d
					for _, m := range msgs {
						counts[m.ID] = append(counts[m.ID], m.ReceiveCount)
					}
					done := dead == n
					mu.Unlock()
					if done {
						return
					}
				}
			})
		}
		wg.Wait()
		require.Equal(t, n, dead)
		require.Len(t, counts, n)
		for id, rc := range counts {
			// Collected after the claims returned, so possibly out of order.
			slices.Sort(rc)
			require.Equal(t, []int{1, 2, 3}, rc, "message %d receive counts", id)
		}
		require.Zero(t, e.live(q))
		require.EqualValues(t, n, e.count(`SELECT count(*) FROM ferry.dead_letters WHERE queue_id = $1 AND receive_count = $2`, q.ID, maxReceives))
		e.requireCountersExact(q)
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

// TestClaimsRacingForTheHead: consumers that claim and ack from one queue
// at once meet rows another claim moved to its lease's slot under them
// (store/doc.go, # Held snapshots); each claim still answers, none fails
// as busy, and every message is claimed once; with a snapshot held.
func TestClaimsRacingForTheHead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("race", store.QueuePatch{})
	const total = 2000
	for i := 0; i < total; i += 100 {
		batch := make([]store.SendMessage, 100)
		for j := range batch {
			batch[j] = msg(i + j)
		}
		e.send(q, batch...)
	}
	// A snapshot held throughout, as a report would: no dead row goes.
	held, err := e.pool.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = held.Rollback(e.ctx) }()
	_, err = held.Exec(e.ctx, `SELECT count(*) FROM ferry.queues`)
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		seen = map[int64]bool{}
		wg   sync.WaitGroup
	)
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, _, err := store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: q, Max: 10, VisibilityTimeout: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				receipts := make([]store.Receipt, len(got))
				mu.Lock()
				for i, m := range got {
					if seen[m.ID] {
						errs <- fmt.Errorf("message %d claimed twice", m.ID)
					}
					seen[m.ID] = true
					receipts[i] = m.Receipt
				}
				mu.Unlock()
				if _, _, err := store.MessageAck(e.ctx, e.pool, q.ID, receipts); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, total)
	require.Zero(t, e.live(q))
}
