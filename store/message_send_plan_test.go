package store_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Invariant 4: a dedup key never creates a second message, also when
// identical sends race.
func TestDedupConcurrent(t *testing.T) {
	t.Parallel()
	setup := queueSetup("dedup", store.QueuePatch{})
	m := store.SendMessage{Body: json.RawMessage(`{"n":1}`), DedupID: "evt-1"}

	t.Run("OneSender", func(t *testing.T) {
		// Group commit may gather several of the sends into one transaction:
		// the repeats inside it must be settled too.
		t.Parallel()
		e, q := setup(t)
		for round := range 3 {
			m := m
			m.DedupID = fmt.Sprintf("evt-%d", round)
			requireOneOriginal(t, e, q, m.DedupID, sendAtOnce(t, []*store.Sender{e.sender}, q.Name, 20, m))
		}
	})

	t.Run("ManySenders", func(t *testing.T) {
		// One Sender per send, each with one worker: 20 transactions race
		// on the dedup primary key.
		t.Parallel()
		e, q := setup(t)
		senders := make([]*store.Sender, 20)
		for i := range senders {
			senders[i] = e.newSender(store.SenderConfig{Workers: 1})
		}
		for round := range 3 {
			m := m
			m.DedupID = fmt.Sprintf("evt-%d", round)
			requireOneOriginal(t, e, q, m.DedupID, sendAtOnce(t, senders, q.Name, 20, m))
		}
	})

	t.Run("RepeatsInOneBatch", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		d := func(id string, n int) store.SendMessage {
			return store.SendMessage{Body: body(t, payload{Seq: n}), DedupID: id}
		}
		res := e.send(q, d("a", 0), d("b", 1), d("a", 2), d("a", 3), msg(4), d("b", 5))
		require.False(t, res[0].Duplicate)
		require.False(t, res[1].Duplicate)
		require.True(t, res[2].Duplicate)
		require.True(t, res[3].Duplicate)
		require.False(t, res[4].Duplicate)
		require.True(t, res[5].Duplicate)
		require.Equal(t, res[0].ID, res[2].ID)
		require.Equal(t, res[0].ID, res[3].ID)
		require.Equal(t, res[1].ID, res[5].ID)
		require.NotEqual(t, res[0].ID, res[1].ID)
		require.EqualValues(t, 3, e.live(q))

		// The first occurrence's body is the one kept.
		got := e.claim(q, 10, time.Minute)
		require.Len(t, got, 3)
		bodies := map[int64]int{}
		for _, m := range got {
			bodies[m.ID] = decode(t, m.Body).Seq
		}
		require.Equal(t, map[int64]int{res[0].ID: 0, res[1].ID: 1, res[4].ID: 4}, bodies)

		// A later batch repeating both ids (and one twice) only gets
		// duplicates of the originals, also after they were acked: the
		// dedup id outlives its message.
		require.Equal(t, []bool{true, true, true}, e.ack(q, receipts(got)...))
		res2 := e.send(q, d("b", 6), d("a", 7), d("b", 8), d("c", 9))
		require.Equal(t, store.SendResult{ID: res[1].ID, Duplicate: true}, res2[0])
		require.Equal(t, store.SendResult{ID: res[0].ID, Duplicate: true}, res2[1])
		require.Equal(t, store.SendResult{ID: res[1].ID, Duplicate: true}, res2[2])
		require.False(t, res2[3].Duplicate)
		require.EqualValues(t, 1, e.live(q))
		e.requireCountersExact(q)
	})

	t.Run("PerQueue", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		other := e.queue("other", store.QueuePatch{})
		a := e.send(q, m)
		b := e.send(other, m)
		require.False(t, a[0].Duplicate)
		require.False(t, b[0].Duplicate, "a dedup id is scoped to its queue")
		require.NotEqual(t, a[0].ID, b[0].ID)
	})

	t.Run("WindowZero", func(t *testing.T) {
		t.Parallel()
		e, q := newQueueEnv(t, "nodedup", store.QueuePatch{DedupWindowSeconds: ptr(0)})
		first := e.send(q, m)
		second := e.send(q, m)
		require.False(t, first[0].Duplicate)
		require.False(t, second[0].Duplicate, "a window of 0 remembers nothing")
		require.NotEqual(t, first[0].ID, second[0].ID)
		require.EqualValues(t, 2, e.live(q))
	})

	t.Run("WindowExpiry", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		first := e.send(q, m)
		require.True(t, e.send(q, m)[0].Duplicate)

		// The window ends: the same id makes a new message, and the dedup
		// row now answers for the new one.
		_, err := e.pool.Exec(e.ctx, `UPDATE ferry.dedup SET expires_at = now() - interval '1 second' WHERE queue_id = $1`, q.ID)
		require.NoError(t, err)
		second := e.send(q, m)
		require.False(t, second[0].Duplicate)
		require.NotEqual(t, first[0].ID, second[0].ID)
		third := e.send(q, m)
		require.Equal(t, store.SendResult{ID: second[0].ID, Duplicate: true}, third[0])
		require.EqualValues(t, 2, e.live(q))

		// DedupExpire removes ended windows only.
		other := store.SendMessage{Body: json.RawMessage(`{}`), DedupID: "evt-2"}
		e.send(q, other)
		_, err = e.pool.Exec(e.ctx, `UPDATE ferry.dedup SET expires_at = now() - interval '1 second' WHERE queue_id = $1 AND dedup_id = 'evt-1'`, q.ID)
		require.NoError(t, err)
		n, err := store.DedupExpire(e.ctx, e.pool, 100)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.dedup WHERE queue_id = $1`, q.ID))
		require.True(t, e.send(q, other)[0].Duplicate)
		require.False(t, e.send(q, m)[0].Duplicate)
	})

	t.Run("ConcurrentTakeover", func(t *testing.T) {
		// Identical sends racing to take over an expired dedup row: still
		// exactly one new message.
		t.Parallel()
		e, q := setup(t)
		old := e.send(q, m)
		_, err := e.pool.Exec(e.ctx, `UPDATE ferry.dedup SET expires_at = now() - interval '1 second' WHERE queue_id = $1`, q.ID)
		require.NoError(t, err)
		senders := make([]*store.Sender, 10)
		for i := range senders {
			senders[i] = e.newSender(store.SenderConfig{Workers: 1})
		}
		results := sendAtOnce(t, senders, q.Name, 20, m)
		originals := 0
		for _, r := range results {
			require.Equal(t, results[0].ID, r.ID)
			require.NotEqual(t, old[0].ID, r.ID)
			if !r.Duplicate {
				originals++
			}
		}
		require.Equal(t, 1, originals)
		require.EqualValues(t, 2, e.live(q))
		e.requireCountersExact(q)
	})
}

// A duplicate is answered with the first message's id even when the dedup
// window ends right after the duplicate was detected (and the sweep removes
// the dedup row, or another send takes it over) before the answer is read.
// The interleaving is forced: the duplicate's send is held inside its
// transaction, another session queues for an exclusive lock on ferry.dedup
// behind it, and so runs between the send's commit and anything the send
// does afterwards.
func TestDedupAnswerAtWindowEnd(t *testing.T) {
	t.Parallel()
	for _, takeover := range []bool{false, true} {
		t.Run(map[bool]string{false: "Swept", true: "TakenOver"}[takeover], func(t *testing.T) {
			t.Parallel()
			e, q := newQueueEnv(t, "window", store.QueuePatch{})
			m := store.SendMessage{Body: json.RawMessage(`{}`), DedupID: "x"}
			first := e.send(q, m)

			release := e.holdSends()
			// The duplicate was detected (the INSERT ran) and the send waits
			// in the hold trigger.
			sendDone := e.startHeldSend(q, m)

			locker, err := e.newNamedPool(1, "locker").Begin(e.ctx)
			require.NoError(t, err)
			defer func() { _ = locker.Rollback(e.ctx) }()
			locked := make(chan error, 1)
			go func() {
				_, err := locker.Exec(e.ctx, `LOCK TABLE ferry.dedup IN ACCESS EXCLUSIVE MODE`)
				locked <- err
			}()
			e.activityWaitingEventually("locker")
			release()
			require.NoError(t, <-locked)

			// The window ends; the sweep removes the row (and a new send may
			// take the id over).
			_, err = locker.Exec(e.ctx, `UPDATE ferry.dedup SET expires_at = now() - interval '1 second' WHERE queue_id = $1`, q.ID)
			require.NoError(t, err)
			n, err := store.DedupExpire(e.ctx, locker, 100)
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			if takeover {
				_, err = locker.Exec(e.ctx, `INSERT INTO ferry.dedup (queue_id, dedup_id, message_id, expires_at) VALUES ($1, 'x', 999999, now() + interval '5 minutes')`, q.ID)
				require.NoError(t, err)
			}
			require.NoError(t, locker.Commit(e.ctx))

			s := <-sendDone
			require.NoError(t, s.err)
			require.Len(t, s.res, 1)
			require.True(t, s.res[0].Duplicate)
			require.Equal(t, first[0].ID, s.res[0].ID, "a duplicate answers the first message's id")
		})
	}
}
