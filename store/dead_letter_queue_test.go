package store_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// dlqPair is a source queue whose dead letters move into target.
func (e *env) dlqPair(maxReceives int) (src, target store.Queue) {
	e.t.Helper()
	target = e.queue(e.name("target"), store.QueuePatch{})
	src = e.queue(e.name("src"), store.QueuePatch{MaxReceives: ptr(maxReceives), DeadLetterQueue: ptr(target.Name)})
	require.Equal(e.t, target.Name, src.DeadLetterQueue)
	return src, target
}

// attrs decodes a message's attributes.
func attrs(t *testing.T, raw json.RawMessage) map[string]string {
	t.Helper()
	m := map[string]string{}
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &m))
	}
	return m
}

// TestDeadLetterQueueEveryPath: a message dead-lettered by each path (a
// claim past max_receives, a nack with dead_letter, a nack of the last
// allowed receive) arrives in the target as a new available message with
// its id, body, attributes, group and dedup_id, receive_count 0, and the
// reason attributes; the source keeps no dead letter, and both queues'
// counters stay exact.
func TestDeadLetterQueueEveryPath(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	src, target := e.dlqPair(1)
	res := e.send(src,
		store.SendMessage{Body: json.RawMessage(`{"n":1}`), Attributes: json.RawMessage(`{"k":"v"}`), DedupID: "d1"},
		msg(2), msg(3))
	sent := resultIDs(res)

	got := e.claim(src, 3, time.Minute)
	require.Equal(t, sent, ids(got))
	// The nack of the last allowed receive (max_receives 1), with an error.
	_, dead := e.nack(store.NackParams{Queue: src, Receipts: receipts(got[:1]), Error: ptr("boom")})
	require.Equal(t, 1, dead)
	// A nack with dead_letter.
	_, dead = e.nack(store.NackParams{Queue: src, Receipts: receipts(got[1:2]), DeadLetter: true})
	require.Equal(t, 1, dead)
	// The lease of the third runs out (it is made visible again at once),
	// and the next claim dead-letters it instead of delivering it again.
	_, err := e.tx.Exec(e.ctx, `UPDATE ferry.messages SET visible_at = now() - interval '1s' WHERE queue_id = $1`, src.ID)
	require.NoError(t, err)
	again, deadByClaim, err := store.MessageClaim(e.ctx, e.db, store.ClaimParams{Queue: src, Max: 10, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.Empty(t, again)
	require.Equal(t, 1, deadByClaim)

	require.Zero(t, e.deadLetters(src), "moved, not kept")
	require.Zero(t, e.live(src))
	require.Equal(t, store.QueueStats{Available: 3}, e.stats(target))
	e.requireCountersExact(src)
	e.requireCountersExact(target)

	moved := e.claim(target, 10, time.Minute)
	require.Equal(t, sent, ids(moved), "the same ids, in send order")
	reasons := []string{"max_receives", "nack", "max_receives"}
	for i, m := range moved {
		require.Equal(t, 1, m.ReceiveCount, "receive_count starts again")
		a := attrs(t, m.Attributes)
		require.Equal(t, src.Name, a["ferry:dead_letter_source"])
		require.Equal(t, reasons[i], a["ferry:dead_letter_reason"], "message %d", i)
	}
	require.JSONEq(t, `{"n":1}`, string(moved[0].Body))
	require.Equal(t, "v", attrs(t, moved[0].Attributes)["k"])
	require.Equal(t, "boom", attrs(t, moved[0].Attributes)["ferry:last_error"])
	require.NotContains(t, attrs(t, moved[1].Attributes), "ferry:last_error")
	require.Equal(t, "d1", *moved[0].DedupID)
	require.Equal(t, res[0].ID, moved[0].ID)
}

// TestDeadLetterQueueGroupOrder: a group's messages dead-lettered one by
// one arrive in the target's group in order, behind the group's live
// messages there, and are delivered there one at a time.
func TestDeadLetterQueueGroupOrder(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	src, target := e.dlqPair(1)
	live := resultIDs(e.send(target, grouped("g", 0)))
	sent := resultIDs(e.send(src, grouped("g", 1), grouped("g", 2), grouped("g", 3)))
	for range 3 {
		got := e.claim(src, 10, time.Minute)
		require.Len(t, got, 1, "one at a time in the source")
		_, dead := e.nack(store.NackParams{Queue: src, Receipts: receipts(got), DeadLetter: true})
		require.Equal(t, 1, dead)
	}
	var order []int64
	for range 4 {
		got := e.claim(target, 10, time.Minute)
		require.Len(t, got, 1, "one at a time in the target")
		order = append(order, got[0].ID)
		require.Equal(t, []bool{true}, e.ack(target, got[0].Receipt))
	}
	require.Equal(t, append(live, sent...), order)
	e.requireCountersExact(target)
}

// TestDeadLetterQueueValidation: the target must be an existing queue,
// not the queue itself, not a subscription, and no cycle may form; each
// refusal changes nothing. Clearing it keeps dead letters with the queue
// again, and deleting a target clears it on its sources.
func TestDeadLetterQueueValidation(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	a := e.queue(e.name("a"), store.QueuePatch{})
	b := e.queue(e.name("b"), store.QueuePatch{DeadLetterQueue: ptr(a.Name)})
	c := e.queue(e.name("c"), store.QueuePatch{DeadLetterQueue: ptr(b.Name)})
	refused := func(name, dlq, want string) {
		t.Helper()
		_, _, err := store.QueueUpsert(e.ctx, e.db, name, store.QueuePatch{DeadLetterQueue: ptr(dlq)})
		var verr *store.ValidationError
		require.ErrorAs(t, err, &verr)
		require.Equal(t, "dead_letter_queue", verr.Field)
		require.Contains(t, verr.Message, want)
	}
	refused(a.Name, a.Name, "itself")
	refused(a.Name, "nope", "no queue named")
	refused(a.Name, c.Name, "cycle")
	refused(a.Name, b.Name, "cycle")
	tp, _, err := store.TopicUpsert(e.ctx, e.db, e.name("t"), store.TopicPatch{})
	require.NoError(t, err)
	sub, _, _, err := store.SubscriptionUpsert(e.ctx, e.db, tp, "s", store.SubscriptionPatch{Queue: store.QueuePatch{DeadLetterQueue: ptr(c.Name)}})
	require.NoError(t, err)
	require.Equal(t, c.Name, sub.DeadLetterQueue)
	refused(a.Name, "s", "no queue named") // a subscription is no target

	got, err := store.QueueGet(e.ctx, e.db, a.Name)
	require.NoError(t, err)
	require.Empty(t, got.DeadLetterQueue, "refusals change nothing")
	sources, err := store.DeadLetterSources(e.ctx, e.db, []int64{a.ID, b.ID, c.ID})
	require.NoError(t, err)
	require.Equal(t, map[int64][]string{a.ID: {b.Name}, b.ID: {c.Name}, c.ID: {tp.Name + "/s"}}, sources)

	// Deleting b clears c's target.
	_, err = store.QueueDelete(e.ctx, e.tx, b.Name)
	require.NoError(t, err)
	got, err = store.QueueGet(e.ctx, e.db, c.Name)
	require.NoError(t, err)
	require.Empty(t, got.DeadLetterQueue)
	// Cleared, a dead letter stays with its queue.
	e.send(got, msg(1))
	m := e.claim(got, 1, time.Minute)
	e.deadLetter(got, m, "x")
	require.EqualValues(t, 1, e.deadLetters(got))
	// And "" clears it by a PUT.
	q, _, err := store.QueueUpsert(e.ctx, e.db, c.Name, store.QueuePatch{DeadLetterQueue: ptr(a.Name)})
	require.NoError(t, err)
	require.Equal(t, a.Name, q.DeadLetterQueue)
	q, _, err = store.QueueUpsert(e.ctx, e.db, c.Name, store.QueuePatch{DeadLetterQueue: ptr("")})
	require.NoError(t, err)
	require.Empty(t, q.DeadLetterQueue)
}

// TestDeadLetterQueueRacingCycle: two PUTs that would together make a
// cycle (a → b and b → a), racing, never both succeed.
func TestDeadLetterQueueRacingCycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for round := range 10 {
		a := e.queue(e.name("a")+string(rune('0'+round)), store.QueuePatch{})
		b := e.queue(e.name("b")+string(rune('0'+round)), store.QueuePatch{})
		var (
			wg   sync.WaitGroup
			errs [2]error
		)
		start := make(chan struct{})
		for i, pair := range [][2]string{{a.Name, b.Name}, {b.Name, a.Name}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, _, errs[i] = store.QueueUpsert(e.ctx, e.pool, pair[0], store.QueuePatch{DeadLetterQueue: ptr(pair[1])})
			}()
		}
		close(start)
		wg.Wait()
		failed := 0
		for _, err := range errs {
			if err != nil {
				var verr *store.ValidationError
				require.ErrorAs(t, err, &verr)
				require.Contains(t, verr.Message, "cycle")
				failed++
			}
		}
		require.Equal(t, 1, failed, "round %d: exactly one of the two is refused", round)
	}
}

// TestDeadLetterQueueWakes: a long poll on the target is woken by a
// dead-lettering in the source, well before its fallback poll.
func TestDeadLetterQueueWakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src, target := e.dlqPair(1)
	recvPool := e.newNamedPool(4, "receiver")
	n := e.runNotifier(recvPool)
	e.activityEventually("receiver", "LISTEN %", 1)
	e.send(src, msg(1))
	got := e.claim(src, 1, time.Minute)
	out := receiveAsync(e.ctx, recvPool, n, store.ReceiveParams{
		ClaimParams: store.ClaimParams{Queue: target, Max: 1, VisibilityTimeout: time.Minute},
		Wait:        20 * time.Second, FallbackPoll: 30 * time.Second,
	})
	e.activityEventually("receiver", "%ferry:message_claim%", 1)
	_, dead, err := store.MessageNackAndWake(e.ctx, e.pool, nil, store.NackParams{Queue: src, Receipts: receipts(got), DeadLetter: true})
	require.NoError(t, err)
	require.Equal(t, 1, dead)
	r := <-out
	require.NoError(t, r.err)
	require.Equal(t, ids(got), ids(r.msgs))
	require.Less(t, r.elapsed, 5*time.Second, "woken by the NOTIFY of the dead-lettering's commit")
}

// ackAll acks the messages.
func (e *env) ackAll(q store.Queue, got []store.Message) []store.ReceiptResult {
	e.t.Helper()
	res, _, err := store.MessageAck(e.ctx, e.db, q.ID, receipts(got))
	require.NoError(e.t, err)
	return res
}
