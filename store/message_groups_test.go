package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// groupTracker watches deliveries of grouped messages: it fails the test
// when a message of a group is claimed while another of the same group is
// held, and records each group's delivery order.
type groupTracker struct {
	t *testing.T
	heldGroups
	order     map[string][]int // group → seqs in delivery order
	delivered map[int64]int    // id → deliveries
}

func newGroupTracker(t *testing.T) *groupTracker {
	return &groupTracker{t: t, heldGroups: newHeldGroups(), order: map[string][]int{}, delivered: map[int64]int{}}
}

// claimed records a claim. It must be called as soon as the claim returns.
func (g *groupTracker) claimed(msgs []store.Message) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range msgs {
		g.delivered[m.ID]++
		if m.Group == nil {
			continue
		}
		grp := *m.Group
		if other, ok := g.held[grp]; ok {
			g.t.Errorf("group %s: message %d claimed while message %d is in flight", grp, m.ID, other)
		}
		g.held[grp] = m.ID
		g.order[grp] = append(g.order[grp], decode(g.t, m.Body).Seq)
	}
}

func seqs(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// Invariant 5: messages of a group are delivered one at a time in send
// order, other groups proceed in parallel, and a poison message blocks its
// group only until it is dead-lettered.
func TestGroupOrdering(t *testing.T) {
	t.Parallel()
	setup := patchedQueueSetup("groups")

	t.Run("ConcurrentConsumers", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t, store.QueuePatch{})
		const (
			groups    = 10
			perGroup  = 30
			ungrouped = 30
			consumers = 8
		)
		// One batch, interleaving the groups: send order is batch order.
		var batch []store.SendMessage
		for seq := range perGroup {
			for g := range groups {
				batch = append(batch, grouped(fmt.Sprintf("g%d", g), seq))
			}
			batch = append(batch, msg(seq))
		}
		e.send(q, batch...)
		total := groups*perGroup + ungrouped

		tr := newGroupTracker(t)
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			acked    int
			deadline = time.Now().Add(30 * time.Second)
		)
		for c := range consumers {
			wg.Go(func() {
				for time.Now().Before(deadline) && !t.Failed() {
					msgs, _, err := store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: q, Max: 1 + c%5, VisibilityTimeout: time.Minute})
					if !assertNoError(t, err) {
						return
					}
					tr.claimed(msgs)
					if len(msgs) == 0 {
						mu.Lock()
						done := acked == total
						mu.Unlock()
						if done {
							return
						}
						pause(2 * time.Millisecond)
						continue
					}
					tr.releasing(msgs)
					res, _, err := store.MessageAck(e.ctx, e.pool, q.ID, receipts(msgs))
					if !assertNoError(t, err) {
						return
					}
					for _, r := range res {
						if !r.OK {
							t.Errorf("ack of message %d was stale", r.Receipt.MessageID)
						}
					}
					mu.Lock()
					acked += len(res)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.False(t, t.Failed())
		require.Equal(t, total, acked)
		require.Len(t, tr.delivered, total)
		for id, n := range tr.delivered {
			require.Equal(t, 1, n, "message %d delivered %d times", id, n)
		}
		require.Len(t, tr.order, groups)
		for g, order := range tr.order {
			require.Equal(t, seqs(perGroup), order, "group %s delivery order", g)
		}
		require.Zero(t, e.live(q))
		e.requireCountersExact(q)
	})

	t.Run("GroupsInParallel", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t, store.QueuePatch{})
		var batch []store.SendMessage
		for seq := range 3 {
			for g := range 10 {
				batch = append(batch, grouped(fmt.Sprintf("g%d", g), seq))
			}
		}
		e.send(q, batch...)
		require.Equal(t, store.QueueStats{Available: 30}, e.counts(q), "waiting messages count as available")

		for seq := range 3 {
			got := e.claim(q, 10, time.Minute)
			require.Len(t, got, 10, "one head of each group at once")
			seen := map[string]bool{}
			for _, m := range got {
				require.False(t, seen[*m.Group], "two messages of group %s in one claim", *m.Group)
				seen[*m.Group] = true
				require.Equal(t, seq, decode(t, m.Body).Seq)
			}
			require.Empty(t, e.claim(q, 10, time.Minute), "every group's head is in flight")
			require.Equal(t, 10, len(e.ack(q, receipts(got)...)))
		}
		require.Zero(t, e.live(q))
	})

	t.Run("NackKeepsHead", func(t *testing.T) {
		// A nacked head stays its group's head: the next message is not
		// delivered past it, whatever the delay.
		t.Parallel()
		e, q := setup(t, store.QueuePatch{MaxReceives: ptr(10)})
		e.send(q, grouped("g", 0), grouped("g", 1))
		got := e.claim(q, 10, time.Minute)
		require.Len(t, got, 1)
		e.nack(store.NackParams{Queue: q, Receipts: receipts(got), Delay: ptr(time.Hour)})
		require.Empty(t, e.claim(q, 10, time.Minute))
		require.Equal(t, store.QueueStats{Available: 1, Delayed: 1}, e.counts(q))
	})

	t.Run("PoisonNacked", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t, store.QueuePatch{MaxReceives: ptr(3)})
		e.send(q, grouped("p", 0), grouped("p", 1), grouped("p", 2), grouped("q", 0), grouped("q", 1), grouped("q", 2))
		var qOrder []int
		for round := 1; round <= 3; round++ {
			got := e.claim(q, 10, time.Minute)
			var poison []store.Message
			for _, m := range got {
				if *m.Group == "p" {
					require.Equal(t, 0, decode(t, m.Body).Seq, "round %d: group p moved past its poison head", round)
					require.Equal(t, round, m.ReceiveCount)
					poison = append(poison, m)
				} else {
					qOrder = append(qOrder, decode(t, m.Body).Seq)
					require.Equal(t, []bool{true}, e.ack(q, m.Receipt))
				}
			}
			require.Len(t, poison, 1, "round %d", round)
			_, dead := e.nack(store.NackParams{Queue: q, Receipts: receipts(poison), Delay: ptr(time.Duration(0)), Error: ptr(fmt.Sprint("fail ", round))})
			require.Equal(t, map[bool]int{true: 1, false: 0}[round == 3], dead)
		}
		require.Equal(t, []int{0, 1, 2}, qOrder, "group q proceeds while p is stuck")

		// Dead-lettered: the group moves on, in order.
		for seq := 1; seq <= 2; seq++ {
			got := e.claim(q, 10, time.Minute)
			require.Len(t, got, 1)
			require.Equal(t, "p", *got[0].Group)
			require.Equal(t, seq, decode(t, got[0].Body).Seq)
			require.Equal(t, 1, got[0].ReceiveCount)
			require.Equal(t, []bool{true}, e.ack(q, got[0].Receipt))
		}
		dls, _, err := store.DeadLetterList(e.ctx, e.pool, q.ID, 0, 10)
		require.NoError(t, err)
		require.Len(t, dls, 1)
		require.Equal(t, "fail 3", *dls[0].LastError)
		require.Equal(t, 3, dls[0].ReceiveCount)
		require.Zero(t, e.live(q))
	})

	t.Run("PoisonExpired", func(t *testing.T) {
		// A consumer that dies on the head every time (its lease expires):
		// the claim that finds the head exhausted dead-letters it and
		// delivers the next message of the group in the same call.
		t.Parallel()
		e, q := setup(t, store.QueuePatch{MaxReceives: ptr(2)})
		res := e.send(q, grouped("p", 0), grouped("p", 1))
		for rc := 1; rc <= 2; rc++ {
			got := e.claimEventually(q, 10, lease)
			require.Equal(t, []int64{res[0].ID}, ids(got))
			require.Equal(t, rc, got[0].ReceiveCount)
		}
		e.waitVisible(q, res[0].ID)
		msgs, dead, err := store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: q, Max: 10, VisibilityTimeout: time.Minute})
		require.NoError(t, err)
		require.Equal(t, 1, dead)
		require.Equal(t, []int64{res[1].ID}, ids(msgs))
		require.EqualValues(t, 1, e.deadLetters(q))
	})

	t.Run("ConcurrentSendsWhileAcking", func(t *testing.T) {
		// The race the group lock exists for: sends to group G file new
		// messages as waiting while the head is being acked or
		// dead-lettered. Every message must be delivered exactly once, in
		// each producer's order, and the group must never be left with
		// waiting messages and no head.
		t.Parallel()
		e, q := setup(t, store.QueuePatch{})
		const (
			producers   = 6
			perProducer = 25
			consumers   = 2
			total       = producers * perProducer
		)
		var (
			wg        sync.WaitGroup
			sendsDone = make(chan struct{})
		)
		for p := range producers {
			wg.Go(func() {
				for seq := range perProducer {
					// Each send returns after its commit, so a producer's
					// sends have a definite order.
					_, _, err := e.sender.Send(context.Background(), q.Name, []store.SendMessage{{
						Group: "G", Body: body(t, payload{G: "G", P: p + 1, Seq: seq}),
					}})
					if !assertNoError(t, err) {
						return
					}
				}
			})
		}
		go func() { wg.Wait(); close(sendsDone) }()

		tr := newGroupTracker(t)
		var (
			cwg          sync.WaitGroup
			mu           sync.Mutex
			finished     int
			deadLettered int
			byProducer   = map[int][]int{}
			deadline     = time.Now().Add(30 * time.Second)
		)
		for c := range consumers {
			cwg.Go(func() {
				for time.Now().Before(deadline) && !t.Failed() {
					msgs, _, err := store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: q, Max: 10, VisibilityTimeout: time.Minute})
					if !assertNoError(t, err) {
						return
					}
					if len(msgs) > 1 {
						t.Errorf("one claim returned %d messages of one group", len(msgs))
						return
					}
					tr.claimed(msgs)
					if len(msgs) == 0 {
						mu.Lock()
						done := finished == total
						mu.Unlock()
						select {
						case <-sendsDone:
							if done {
								return
							}
						default:
						}
						pause(time.Millisecond)
						continue
					}
					m := msgs[0]
					pl := decode(t, m.Body)
					mu.Lock()
					byProducer[pl.P] = append(byProducer[pl.P], pl.Seq)
					n := finished
					mu.Unlock()
					tr.releasing(msgs)
					var ok bool
					if (n+c)%7 == 3 {
						res, _, err := store.MessageNack(e.ctx, e.pool, store.NackParams{Queue: q, Receipts: receipts(msgs), DeadLetter: true})
						if !assertNoError(t, err) {
							return
						}
						ok = res[0].OK
						mu.Lock()
						deadLettered++
						mu.Unlock()
					} else {
						res, _, err := store.MessageAck(e.ctx, e.pool, q.ID, receipts(msgs))
						if !assertNoError(t, err) {
							return
						}
						ok = res[0].OK
					}
					if !ok {
						t.Errorf("receipt of message %d was stale", m.ID)
					}
					mu.Lock()
					finished++
					mu.Unlock()
				}
			})
		}
		cwg.Wait()
		<-sendsDone
		waiting := e.count(`SELECT count(*) FROM ferry.messages WHERE waiting`)
		heads := e.count(`SELECT count(*) FROM ferry.messages WHERE NOT waiting`)
		require.False(t, t.Failed())
		require.Equal(t, total, finished, "group stuck? %d waiting messages, %d heads", waiting, heads)
		require.Zero(t, waiting)
		require.Zero(t, e.live(q))
		require.EqualValues(t, deadLettered, e.deadLetters(q))
		require.Len(t, tr.delivered, total)
		for id, n := range tr.delivered {
			require.Equal(t, 1, n, "message %d delivered %d times", id, n)
		}
		e.requireCountersExact(q)
		// Checked last so that a failure here is about order alone.
		for p := 1; p <= producers; p++ {
			require.Equal(t, seqs(perProducer), byProducer[p], "producer %d: delivery order differs from send order", p)
		}
	})

	t.Run("SequentialSendsOnTwoConnections", func(t *testing.T) {
		// Sends to one group, one after the other (each Send returns after
		// its commit before the next starts), through two connections:
		// delivery order must still be send order.
		t.Parallel()
		e, q := setup(t, store.QueuePatch{})
		senders := []*store.Sender{
			e.newSenderOn(e.newPool(1), store.SenderConfig{Workers: 1}),
			e.newSenderOn(e.newPool(1), store.SenderConfig{Workers: 1}),
		}
		const n = 6
		sent := make([]int64, n)
		for seq := range n {
			res, _, err := senders[seq%2].Send(e.ctx, q.Name, []store.SendMessage{grouped("G", seq)})
			require.NoError(t, err)
			sent[seq] = res[0].ID
		}
		var order []int
		for range n {
			got := e.claim(q, 10, time.Minute)
			require.Len(t, got, 1)
			order = append(order, decode(t, got[0].Body).Seq)
			require.Equal(t, []bool{true}, e.ack(q, got[0].Receipt))
		}
		require.Equal(t, seqs(n), order, "delivery order within the group (message ids in send order: %v)", sent)
	})
}

// advisoryWaiters counts sessions of the test's database waiting for an
// advisory lock.
func (e *env) advisoryWaiters() (int, error) {
	var n int
	err := e.pool.QueryRow(e.ctx, `
		SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n)
	return n, err
}

// whileHeld runs hold in a transaction and, while that transaction is still
// open, starts a send of m; it commits once the send either finished or
// waits for a lock, then waits for the send. This makes the interleaving
// that the group lock exists for happen every time instead of by chance:
// without the lock, the send reads the group as it was before hold.
func (e *env) whileHeld(q store.Queue, hold func(tx pgx.Tx), m store.SendMessage) store.SendResult {
	e.t.Helper()
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(e.t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	hold(tx)

	type sent struct {
		res []store.SendResult
		err error
	}
	done := make(chan sent, 1)
	go func() {
		res, _, err := e.sender.Send(context.Background(), q.Name, []store.SendMessage{m})
		done <- sent{res, err}
	}()
	outcome, _ := doneOrWaiting(e.t, done, e.advisoryWaiters, "the send neither finished nor waited for a lock")
	require.NoError(e.t, tx.Commit(e.ctx))
	s := outcome()
	require.NoError(e.t, s.err)
	return s.res[0]
}

// requireOneHeadThenDrains checks that group grp has exactly one head,
// its oldest message, and then that it drains in the order of seqs.
func (e *env) requireOneHeadThenDrains(q store.Queue, grp string, seqs []int, msgAndArgs ...any) {
	e.t.Helper()
	e.requireOneHead(q, grp)
	require.Equal(e.t, seqs, e.drainGroup(q, grp), msgAndArgs...)
}

// sendHead sends message 0 of group "g" and claims it for a minute: the
// group's head, in flight.
func (e *env) sendHead(q store.Queue) []store.Message {
	e.t.Helper()
	return e.sendClaimed(q, grouped("g", 0), time.Minute)
}

// requireOneHead checks that the group has exactly one head, its oldest
// message.
func (e *env) requireOneHead(q store.Queue, grp string) {
	e.t.Helper()
	var heads, oldest, head int64
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `
		SELECT count(*) FILTER (WHERE NOT waiting), coalesce(min(id), 0), coalesce(min(id) FILTER (WHERE NOT waiting), 0)
		FROM ferry.messages WHERE queue_id = $1 AND grp = $2`, q.ID, grp).Scan(&heads, &oldest, &head))
	require.EqualValues(e.t, 1, heads, "group %s heads", grp)
	require.Equal(e.t, oldest, head, "group %s: the head is not the oldest message", grp)
}

// Invariant 5, the interleavings behind it: a send to a group while the
// group's head is being removed (ack, dead letter, retention) or while a
// message joins it (redrive), made to happen deterministically.
func TestGroupLockRaces(t *testing.T) {
	t.Parallel()
	setup := queueSetup("races", store.QueuePatch{RetentionSeconds: ptr(60)})

	t.Run("SendWhileAck", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		head := e.sendHead(q)
		e.whileHeld(q, func(tx pgx.Tx) {
			res, _, err := store.MessageAck(e.ctx, tx, q.ID, receipts(head))
			require.NoError(t, err)
			require.True(t, res[0].OK)
		}, grouped("g", 1))
		e.requireOneHeadThenDrains(q, "g", []int{1})
	})

	t.Run("SendWhileDeadLetter", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		head := e.sendHead(q)
		e.whileHeld(q, func(tx pgx.Tx) {
			_, dead, err := store.MessageNack(e.ctx, tx, store.NackParams{Queue: q, Receipts: receipts(head), DeadLetter: true})
			require.NoError(t, err)
			require.Equal(t, 1, dead)
		}, grouped("g", 1))
		e.requireOneHeadThenDrains(q, "g", []int{1})
	})

	t.Run("SendWhileExhaustedHeadDeadLettered", func(t *testing.T) {
		t.Parallel()
		e, q := newQueueEnv(t, "races", store.QueuePatch{MaxReceives: ptr(1)})
		e.send(q, grouped("g", 0))
		head := e.claimOne(q, lease)
		e.waitVisible(q, head[0].ID)
		e.whileHeld(q, func(tx pgx.Tx) {
			msgs, dead, err := store.MessageClaim(e.ctx, tx, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
			require.NoError(t, err)
			require.Empty(t, msgs)
			require.Equal(t, 1, dead)
		}, grouped("g", 1))
		e.requireOneHeadThenDrains(q, "g", []int{1})
	})

	t.Run("SendWhileExpire", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		e.backdate(q, resultIDs(e.send(q, grouped("g", 0)))...)
		e.whileHeld(q, func(tx pgx.Tx) {
			n, err := store.MessageExpire(e.ctx, tx, 100)
			require.NoError(t, err)
			require.EqualValues(t, 1, n.Total())
		}, grouped("g", 1))
		e.requireOneHeadThenDrains(q, "g", []int{1})
	})

	t.Run("SendWhileRedrive", func(t *testing.T) {
		// The redriven message becomes the head of an empty group; a send
		// meanwhile must queue behind it, not become a second head.
		t.Parallel()
		e, q := setup(t)
		e.send(q, grouped("g", 0))
		e.deadLetter(q, e.claim(q, 1, time.Minute), "x")
		e.whileHeld(q, func(tx pgx.Tx) {
			n, err := store.DeadLetterRedrive(e.ctx, tx, store.RedriveParams{QueueID: q.ID, Limit: 10})
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}, grouped("g", 1))
		e.requireOneHeadThenDrains(q, "g", []int{0, 1})
	})
}

// sendHeld starts a send of m that stops right after its INSERT into
// ferry.messages (so after taking its locks and deciding whether the
// message waits), runs op while that send's transaction is open, and lets
// the send commit once op finished or waits for a lock. op runs on a pool
// named "op" so that its waits can be told apart from the send's.
func (e *env) sendHeld(q store.Queue, m store.SendMessage, op func(opPool *pgxpool.Pool) error) store.SendResult {
	e.t.Helper()
	release := e.holdSends()
	defer release()

	sendDone := e.startHeldSend(q, m)

	opPool := e.newNamedPool(4, "op")
	opDone := make(chan error, 1)
	go func() { opDone <- op(opPool) }()
	outcome, _ := doneOrWaiting(e.t, opDone, func() (int, error) { return e.lockWaiters("op") },
		"the operation neither finished nor waited for a lock")

	release()
	s := <-sendDone
	opErr := outcome()
	require.NoError(e.t, s.err)
	require.NoError(e.t, opErr)
	return s.res[0]
}

// The mirror image of TestGroupLockRaces: the send's transaction is the
// one held open, after its INSERT, while the group's head is removed or
// another send arrives. Without the group lock the other operation reads
// the group as it was before the send and, after both commit, the group
// has no head (or two).
func TestGroupLockSendHeld(t *testing.T) {
	t.Parallel()
	setup := patchedQueueSetup("held")

	t.Run("AckWhileSendHeld", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t, store.QueuePatch{})
		head := e.sendHead(q)
		e.sendHeld(q, grouped("g", 1), func(opPool *pgxpool.Pool) error {
			res, _, err := store.MessageAck(e.ctx, opPool, q.ID, receipts(head))
			if err == nil && !res[0].OK {
				return fmt.Errorf("ack was stale")
			}
			return err
		})
		e.requireOneHeadThenDrains(q, "g", []int{1})
	})

	t.Run("DeadLetterWhileSendHeld", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t, store.QueuePatch{})
		head := e.sendHead(q)
		e.sendHeld(q, grouped("g", 1), func(opPool *pgxpool.Pool) error {
			_, dead, err := store.MessageNack(e.ctx, opPool, store.NackParams{Queue: q, Receipts: receipts(head), DeadLetter: true})
			if err == nil && dead != 1 {
				return fmt.Errorf("dead-lettered %d", dead)
			}
			return err
		})
		e.requireOneHeadThenDrains(q, "g", []int{1})
	})

	t.Run("ExhaustedWhileSendHeld", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t, store.QueuePatch{MaxReceives: ptr(1)})
		e.send(q, grouped("g", 0))
		head := e.claimOne(q, lease)
		e.waitVisible(q, head[0].ID)
		var delivered []int
		e.sendHeld(q, grouped("g", 1), func(opPool *pgxpool.Pool) error {
			// Having waited for the send, the claim may deliver its message
			// at once.
			msgs, dead, err := store.MessageClaim(e.ctx, opPool, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
			if err != nil {
				return err
			}
			if dead != 1 {
				return fmt.Errorf("dead-lettered %d", dead)
			}
			for _, m := range msgs {
				var p payload
				if err := json.Unmarshal(m.Body, &p); err != nil {
					return err
				}
				delivered = append(delivered, p.Seq)
				if _, _, err := store.MessageAck(e.ctx, opPool, q.ID, []store.Receipt{m.Receipt}); err != nil {
					return err
				}
			}
			return nil
		})
		if len(delivered) == 0 {
			e.requireOneHead(q, "g")
		}
		require.Equal(t, []int{1}, append(delivered, e.drainGroup(q, "g")...))
	})

	t.Run("ExpireWhileSendHeld", func(t *testing.T) {
		t.Parallel()
		e, q := newQueueEnv(t, "held", store.QueuePatch{RetentionSeconds: ptr(60)})
		e.backdate(q, resultIDs(e.send(q, grouped("g", 0)))...)
		e.sendHeld(q, grouped("g", 1), func(opPool *pgxpool.Pool) error {
			// Retention does not wait for a group's lock (it could deadlock
			// with an application's transaction that holds it): it leaves
			// the group to the next sweep.
			n, err := store.MessageExpire(e.ctx, opPool, 100)
			if err == nil && n.Total() != 0 {
				return fmt.Errorf("expired %d while the group's lock was held", n.Total())
			}
			return err
		})
		require.EqualValues(t, 1, e.expire(100), "the next sweep")
		e.requireOneHeadThenDrains(q, "g", []int{1})
	})

	t.Run("SendWhileSendHeld", func(t *testing.T) {
		// Two sends into an empty group: the second must file its message
		// behind the first, not make a second head.
		t.Parallel()
		e, q := setup(t, store.QueuePatch{})
		var second []store.SendResult
		first := e.sendHeld(q, grouped("g", 0), func(opPool *pgxpool.Pool) error {
			s := store.NewSender(opPool, store.SenderConfig{Workers: 1})
			defer s.Close()
			var err error
			second, _, err = s.Send(e.ctx, q.Name, []store.SendMessage{grouped("g", 1)})
			return err
		})
		require.Len(t, second, 1)
		e.requireOneHeadThenDrains(q, "g", []int{0, 1}, "ids %d, %d", first.ID, second[0].ID)
	})
}

// An ack that promotes a group's next message says so (MessageAckAndWake
// wakes long polls on it); an ack that promotes nothing does not.
func TestAckReportsPromotion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, pool := e.ctx, e.pool
	q := e.queue("promo", store.QueuePatch{})
	s := e.newSender(store.SenderConfig{Workers: 1})
	_, _, err := s.Send(ctx, "promo", []store.SendMessage{
		{Body: json.RawMessage(`1`), Group: "g"}, {Body: json.RawMessage(`2`), Group: "g"}, {Body: json.RawMessage(`3`)},
	})
	require.NoError(t, err)
	got, _, err := store.MessageClaim(ctx, pool, store.ClaimParams{Queue: q, Max: 10, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 2, "the group's head and the ungrouped message")
	for _, m := range got {
		_, promoted, err := store.MessageAck(ctx, pool, q.ID, []store.Receipt{m.Receipt})
		require.NoError(t, err)
		require.Equal(t, m.Group != nil, promoted, "message %d", m.ID)
	}
}

// ferry.message_promote promotes, per group of the rows
// that left, the oldest waiting message when no other head remains, skips
// the rows that left by id (a caller's statement may still see them), and
// keeps to the queues given: the same group name in another queue, a
// group that still has a head, and rows without a group are left alone.
func TestMessagePromote(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	q := e.queue(e.name("promote"), store.QueuePatch{})
	other := e.queue(e.name("promote-other"), store.QueuePatch{})
	sent := resultIDs(e.send(q, grouped("g", 1), grouped("g", 2), grouped("g", 3), grouped("h", 1), grouped("h", 2), msg(1)))
	otherIDs := resultIDs(e.send(other, grouped("g", 1), grouped("g", 2)))
	waiting := func(id int64) bool {
		var w bool
		require.NoError(t, e.db.QueryRow(e.ctx, `SELECT waiting FROM ferry.messages WHERE id = $1`, id).Scan(&w))
		return w
	}
	promote := func(queues []int64, groups []*string, ids []int64) int64 {
		var n int64
		require.NoError(t, e.db.QueryRow(e.ctx, `SELECT ferry.message_promote($1, $2, $3)`, queues, groups, ids).Scan(&n))
		return n
	}
	g, h := ptr("g"), ptr("h")

	// g's head is named as gone though its row is still there; h's head
	// is not: only g's next message is promoted, in q only.
	require.EqualValues(t, 1, promote([]int64{q.ID, q.ID, q.ID}, []*string{g, h, nil}, []int64{sent[0], sent[5], sent[5]}))
	require.False(t, waiting(sent[1]), "g's next message is its head")
	require.True(t, waiting(sent[2]))
	require.True(t, waiting(sent[4]), "h still has its head")
	require.True(t, waiting(otherIDs[1]), "the other queue's group g is not touched")

	// Again: g now has a head that did not leave, so nothing moves.
	require.Zero(t, promote([]int64{q.ID}, []*string{g}, []int64{sent[0]}))
	require.True(t, waiting(sent[2]))

	// Rows without a group, or none at all, promote nothing.
	require.Zero(t, promote([]int64{q.ID}, []*string{nil}, []int64{sent[5]}))
	require.Zero(t, promote(nil, nil, nil))
}
