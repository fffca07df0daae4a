package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// backdate makes messages look sent two minutes ago.
func (e *env) backdate(q store.Queue, ids ...int64) {
	e.t.Helper()
	tag, err := e.pool.Exec(e.ctx, `UPDATE ferry.messages SET sent_at = now() - interval '2 minutes' WHERE queue_id = $1 AND id = ANY($2)`, q.ID, ids)
	require.NoError(e.t, err)
	require.EqualValues(e.t, len(ids), tag.RowsAffected())
}

// backdateAndExpire backdates messages ids and requires that an expiry
// sweep removes just them.
func (e *env) backdateAndExpire(q store.Queue, ids ...int64) {
	e.t.Helper()
	e.backdate(q, ids...)
	require.EqualValues(e.t, len(ids), e.expire(100))
}

// sendGroup sends messages 0 .. n-1 of group grp and returns their ids.
func (e *env) sendGroup(q store.Queue, grp string, n int) []int64 {
	e.t.Helper()
	msgs := make([]store.SendMessage, n)
	for i := range msgs {
		msgs[i] = grouped(grp, i)
	}
	return resultIDs(e.send(q, msgs...))
}

func (e *env) expire(limit int) int64 {
	e.t.Helper()
	n, err := store.MessageExpire(e.ctx, e.pool, limit)
	require.NoError(e.t, err)
	return n.Total()
}

// drainGroup claims and acks the group's messages one at a time and returns
// their seqs; it fails if the group is stuck (messages left, none
// claimable).
func (e *env) drainGroup(q store.Queue, grp string) []int {
	e.t.Helper()
	var order []int
	for {
		left := e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND grp = $2`, q.ID, grp)
		if left == 0 {
			return order
		}
		got := e.claim(q, 10, time.Minute)
		var mine []store.Message
		for _, m := range got {
			if m.Group != nil && *m.Group == grp {
				mine = append(mine, m)
			}
		}
		require.Len(e.t, mine, 1, "group %s is stuck: %d messages left, waiting %d", grp, left,
			e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND grp = $2 AND waiting`, q.ID, grp))
		order = append(order, decode(e.t, mine[0].Body).Seq)
		require.Equal(e.t, []bool{true}, e.ack(q, mine[0].Receipt))
	}
}

func TestMessageExpire(t *testing.T) {
	t.Parallel()
	setup := queueSetup("retained", store.QueuePatch{RetentionSeconds: ptr(60)})

	t.Run("Ungrouped", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		keep := e.queue("long", store.QueuePatch{})
		sent := resultIDs(e.send(q, msg(0), msg(1), msg(2), msg(3)))
		kept := resultIDs(e.send(keep, msg(0)))
		e.backdate(keep, kept...) // within its 4-day retention
		inFlight := e.claim(q, 1, time.Minute)
		require.Equal(t, sent[:1], ids(inFlight))
		e.backdate(q, sent[0], sent[1], sent[2])

		require.EqualValues(t, 3, e.expire(100), "in-flight messages expire too")
		require.Zero(t, e.expire(100))
		require.EqualValues(t, 1, e.live(q))
		require.EqualValues(t, 1, e.live(keep))
		require.Equal(t, store.QueueStats{Available: 1}, e.counts(q))
		require.Equal(t, []bool{false}, e.ack(q, inFlight[0].Receipt))
		e.requireCountersExact(q)
		e.requireCountersExact(keep)
	})

	t.Run("Bounded", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		var batch []store.SendMessage
		for i := range 25 {
			batch = append(batch, msg(i))
		}
		e.backdate(q, resultIDs(e.send(q, batch...))...)
		require.EqualValues(t, 10, e.expire(10))
		require.EqualValues(t, 10, e.expire(10))
		require.EqualValues(t, 5, e.expire(10))
		require.Zero(t, e.live(q))
		e.requireCountersExact(q)
	})

	t.Run("HeadExpires", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		sent := e.sendGroup(q, "g", 3)
		e.backdateAndExpire(q, sent[0])
		require.Equal(t, []int{1, 2}, e.drainGroup(q, "g"), "the successor of an expired head is promoted")
		e.requireCountersExact(q)
	})

	t.Run("WaitingExpires", func(t *testing.T) {
		// A waiting message expires behind a live head: the head stays the
		// only head.
		t.Parallel()
		e, q := setup(t)
		sent := e.sendGroup(q, "g", 3)
		e.backdateAndExpire(q, sent[1])
		require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND NOT waiting`, q.ID))
		require.Equal(t, []int{0, 2}, e.drainGroup(q, "g"))
	})

	t.Run("HeadAndNextExpire", func(t *testing.T) {
		// The head and the message after it expire in the same sweep (the
		// usual case: messages expire oldest first, several per sweep):
		// the first survivor must become the head.
		t.Parallel()
		e, q := setup(t)
		sent := e.sendGroup(q, "g", 4)
		e.backdateAndExpire(q, sent[0], sent[1])
		require.EqualValues(t, 2, e.live(q))
		e.requireCountersExact(q)
		require.Equal(t, []int{2, 3}, e.drainGroup(q, "g"))
	})

	t.Run("HeadInFlightExpires", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		sent := e.sendGroup(q, "g", 2)
		got := e.claim(q, 10, time.Minute)
		require.Equal(t, sent[:1], ids(got))
		e.backdateAndExpire(q, sent[0])
		require.Equal(t, []bool{false}, e.ack(q, got[0].Receipt))
		require.Equal(t, []int{1}, e.drainGroup(q, "g"))
	})

	t.Run("DeadLetters", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		e.send(q, msg(0), msg(1))
		got := e.claim(q, 2, time.Minute)
		e.deadLetter(q, got, "x")
		_, err := e.pool.Exec(e.ctx, `UPDATE ferry.dead_letters SET dead_lettered_at = now() - interval '2 minutes' WHERE queue_id = $1 AND id = $2`, q.ID, got[0].ID)
		require.NoError(t, err)
		require.EqualValues(t, 1, e.expire(100))
		require.EqualValues(t, 1, e.deadLetters(q))
		require.Equal(t, store.QueueStats{DeadLetters: 1}, e.counts(q))
		e.requireCountersExact(q)
	})

	t.Run("ConcurrentSends", func(t *testing.T) {
		// Expiry of a group's head racing with sends to the group: no
		// message ends waiting without a head.
		t.Parallel()
		e, q := setup(t)
		for round := range 10 {
			grp := fmt.Sprint("g", round)
			sent := resultIDs(e.send(q, grouped(grp, 0)))
			e.backdate(q, sent...)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				for seq := 1; seq <= 3; seq++ {
					_, _, err := e.sender.Send(context.Background(), q.Name, []store.SendMessage{grouped(grp, seq)})
					assertNoError(t, err)
				}
			}()
			go func() {
				defer wg.Done()
				_, err := store.MessageExpire(context.Background(), e.pool, 100)
				assertNoError(t, err)
			}()
			wg.Wait()
			// A sweep that found the group's lock taken by a send left the
			// head to the next sweep.
			e.expire(100)
			require.Equal(t, []int{1, 2, 3}, e.drainGroup(q, grp))
		}
		e.requireCountersExact(q)
	})
}

func TestQueueDelete(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "doomed", store.QueuePatch{})
	keep := e.queue("kept", store.QueuePatch{})

	var batch []store.SendMessage
	for i := range 30 {
		m := msg(i)
		if i%3 == 0 {
			m.Group = fmt.Sprint("g", i%2)
		}
		m.DedupID = fmt.Sprint("d", i)
		batch = append(batch, m)
	}
	e.send(q, batch...)
	e.send(keep, batch...)
	got := e.claim(q, 5, time.Minute)
	e.deadLetter(q, got[:2], "x")

	// Senders keep sending to the queue while it is deleted; they stop at
	// the first refusal.
	var wg sync.WaitGroup
	stopped := make(chan error, 4)
	for p := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				m := grouped(fmt.Sprint("p", p%2), i)
				m.DedupID = fmt.Sprint("late-", p, "-", i)
				_, _, err := e.sender.Send(context.Background(), q.Name, []store.SendMessage{m, msg(i)})
				if err != nil {
					stopped <- err
					return
				}
			}
		})
	}
	// Let the senders get going: wait until some of their messages landed.
	require.Eventually(t, func() bool {
		var n int
		err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ferry.dedup WHERE queue_id = $1 AND dedup_id LIKE 'late-%'`, q.ID).Scan(&n)
		return err == nil && n >= 8
	}, 10*time.Second, time.Millisecond)

	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	id, err := store.QueueDelete(e.ctx, tx, q.Name)
	require.NoError(t, err)
	require.Equal(t, q.ID, id)
	require.NoError(t, tx.Commit(e.ctx))

	for {
		n, err := store.QueueDeleteContent(e.ctx, e.pool, id, 7)
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	wg.Wait()
	close(stopped)
	for err := range stopped {
		require.True(t, errors.Is(err, store.ErrNotFound), "sender stopped with %v", err)
	}
	// Nothing landed after the cleanup either.
	n, err := store.QueueDeleteContent(e.ctx, e.pool, id, 7)
	require.NoError(t, err)
	require.Zero(t, n)

	for _, table := range []string{"ferry.queues WHERE id", "ferry.messages WHERE queue_id", "ferry.dead_letters WHERE queue_id",
		"ferry.dedup WHERE queue_id", "ferry.queue_counts WHERE queue_id"} {
		require.Zero(t, e.count(`SELECT count(*) FROM `+table+` = $1`, id), table)
	}
	orphans, err := store.QueueOrphans(e.ctx, e.pool, 10)
	require.NoError(t, err)
	require.Empty(t, orphans)
	_, err = store.QueueGet(e.ctx, e.pool, q.Name)
	require.ErrorIs(t, err, store.ErrNotFound)

	// The other queue is untouched.
	require.EqualValues(t, 30, e.live(keep))
	require.EqualValues(t, 30, e.count(`SELECT count(*) FROM ferry.dedup WHERE queue_id = $1`, keep.ID))
	e.requireCountersExact(keep)

	// A new queue of the same name starts empty.
	again := e.queue(q.Name, store.QueuePatch{})
	require.NotEqual(t, q.ID, again.ID)
	require.Equal(t, store.QueueStats{}, e.stats(again))
	res := e.send(again, store.SendMessage{Body: body(t, payload{}), DedupID: "d0"})
	require.False(t, res[0].Duplicate, "dedup ids of the deleted queue are gone")
}
