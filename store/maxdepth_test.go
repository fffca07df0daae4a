package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

func deduped(id string, seq int) store.SendMessage {
	m := msg(seq)
	m.DedupID = id
	return m
}

// TestMaxDepthDuplicatesTakeNoRoom: a dedup_id already accepted is
// answered as a duplicate with the first message's id also when the queue
// is at max_depth (API.md: duplicates take no room); only the batch's new
// messages count against the limit.
func TestMaxDepthDuplicatesTakeNoRoom(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "bounded", store.QueuePatch{MaxDepth: ptr[int64](2)})
	first := e.send(q, deduped("a", 1), deduped("b", 2))
	require.EqualValues(t, 2, e.live(q))

	// At max_depth: the resend of a is a duplicate, not a refusal.
	again := e.send(q, deduped("a", 1))
	require.Equal(t, []store.SendResult{{ID: first[0].ID, Duplicate: true}}, again)
	again = e.send(q, deduped("b", 2), deduped("a", 1), deduped("b", 3))
	require.Equal(t, []store.SendResult{
		{ID: first[1].ID, Duplicate: true}, {ID: first[0].ID, Duplicate: true}, {ID: first[1].ID, Duplicate: true},
	}, again)

	// A duplicate with one new message: the new one does not fit, and the
	// whole batch is refused.
	_, _, err := e.sender.Send(e.ctx, q.Name, []store.SendMessage{deduped("a", 1), deduped("c", 3)})
	var full *store.QueueFullError
	require.ErrorAs(t, err, &full)
	require.EqualValues(t, 2, full.Depth)
	require.EqualValues(t, 2, e.live(q))

	// With room for one, the same batch is a duplicate and one new message.
	got := e.claim(q, 1, time.Minute)
	require.Equal(t, []bool{true}, e.ack(q, receipts(got)...))
	res := e.send(q, deduped("a", 1), deduped("c", 3))
	require.Equal(t, store.SendResult{ID: first[0].ID, Duplicate: true}, res[0])
	require.False(t, res[1].Duplicate)
	require.EqualValues(t, 2, e.live(q))
	e.requireCountersExact(q)
}

// TestMaxDepthConcurrentDuplicates: concurrent sends of one dedup id to a
// queue with room for one message all succeed, whether group commit puts
// them in one transaction or not: one message is written, every answer
// names it.
func TestMaxDepthConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "bounded", store.QueuePatch{MaxDepth: ptr[int64](3)})
	e.send(q, msg(1), msg(2))
	for round := range 5 {
		id := fmt.Sprintf("same-%d", round)
		const n = 16
		var (
			results [n][]store.SendResult
			errs    [n]error
		)
		atOnce(n, func(i int) {
			results[i], _, errs[i] = e.sender.Send(context.Background(), q.Name, []store.SendMessage{deduped(id, i)})
		})
		created := 0
		for i := range n {
			require.NoError(t, errs[i], "round %d send %d", round, i)
			require.Equal(t, results[0][0].ID, results[i][0].ID, "round %d: every answer names the one message", round)
			if !results[i][0].Duplicate {
				created++
			}
		}
		require.Equal(t, 1, created, "round %d", round)
		require.EqualValues(t, 3, e.live(q))
		// Make room for the next round.
		got := e.claim(q, 1, time.Minute)
		require.Equal(t, []bool{true}, e.ack(q, receipts(got)...))
	}
	e.requireCountersExact(q)
}

// TestMaxDepthBatchNeverFits: a batch with more new messages than
// max_depth can never be accepted, so it is a client's mistake (a
// ValidationError, 400), not a full queue (429, retry later); it writes
// nothing. Repeats within the batch and live duplicates are not new.
func TestMaxDepthBatchNeverFits(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "bounded", store.QueuePatch{MaxDepth: ptr[int64](3)})

	_, _, err := e.sender.Send(e.ctx, q.Name, []store.SendMessage{msg(1), msg(2), msg(3), msg(4)})
	var verr *store.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, "messages", verr.Field)
	require.Contains(t, verr.Message, "max_depth")
	require.Zero(t, e.live(q))

	// Four messages, three new: it fits the empty queue.
	res := e.send(q, deduped("x", 1), deduped("y", 2), deduped("x", 1), msg(3))
	require.True(t, res[2].Duplicate)
	require.EqualValues(t, 3, e.live(q))

	// Five messages, two live duplicates, three new: each could fit an
	// empty queue, so a full one is a 429, not a 400.
	_, _, err = e.sender.Send(e.ctx, q.Name,
		[]store.SendMessage{deduped("x", 1), deduped("y", 2), msg(4), msg(5), msg(6)})
	var full *store.QueueFullError
	require.ErrorAs(t, err, &full)
	require.EqualValues(t, 3, e.live(q))
	e.requireCountersExact(q)
}

// TestMaxDepthDuplicatesOverTheLimit: a queue can hold more than its
// max_depth (the limit was lowered after the messages came); a resend of
// an accepted dedup_id is still answered as the duplicate it is, and a new
// message is still refused.
func TestMaxDepthDuplicatesOverTheLimit(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "lowered", store.QueuePatch{})
	first := e.send(q, deduped("a", 1), deduped("b", 2), deduped("c", 3))
	q, created, err := store.QueueUpsert(e.ctx, e.pool, q.Name, store.QueuePatch{MaxDepth: ptr[int64](2)})
	require.NoError(t, err)
	require.False(t, created)

	e.sender = e.newSender(store.SenderConfig{}) // one that has not cached the queue without its limit

	again := e.send(q, deduped("c", 3), deduped("a", 1))
	require.Equal(t, []store.SendResult{{ID: first[2].ID, Duplicate: true}, {ID: first[0].ID, Duplicate: true}}, again)
	_, _, err = e.sender.Send(e.ctx, q.Name, []store.SendMessage{deduped("d", 4)})
	var full *store.QueueFullError
	require.ErrorAs(t, err, &full)
	require.EqualValues(t, 3, e.live(q))
}
