package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

func TestQueueStats(t *testing.T) {
	t.Parallel()
	setup := queueSetup("stats", store.QueuePatch{MaxReceives: ptr(100)})

	t.Run("Lifecycle", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		require.Equal(t, store.QueueStats{}, e.stats(q))

		sent := resultIDs(e.send(q, msg(1), msg(2), msg(3),
			store.SendMessage{Body: body(t, payload{Seq: 4}), Delay: ptr(time.Hour)},
			grouped("g", 0), grouped("g", 1)))
		m1, m2, m3 := sent[0], sent[1], sent[2]
		require.Equal(t, store.QueueStats{Available: 5, Delayed: 1}, e.counts(q))

		_, err := e.pool.Exec(e.ctx, `UPDATE ferry.messages SET sent_at = now() - interval '100 seconds' WHERE queue_id = $1 AND id = $2`, q.ID, m1)
		require.NoError(t, err)
		age := e.stats(q).OldestAgeSeconds
		require.GreaterOrEqual(t, age, int64(100))
		require.Less(t, age, int64(130))

		got := e.claim(q, 2, time.Minute)
		require.Equal(t, []int64{m1, m2}, ids(got))
		require.Equal(t, store.QueueStats{Available: 3, InFlight: 2, Delayed: 1}, e.counts(q))

		// An expired lease counts as available again.
		short := e.claim(q, 1, lease)
		require.Equal(t, []int64{m3}, ids(short))
		e.waitVisible(q, m3)
		require.Equal(t, store.QueueStats{Available: 3, InFlight: 2, Delayed: 1}, e.counts(q))

		// nack with a delay: delayed.
		e.nack(store.NackParams{Queue: q, Receipts: receipts(got[:1]), Delay: ptr(time.Hour)})
		require.Equal(t, store.QueueStats{Available: 3, InFlight: 1, Delayed: 2}, e.counts(q))

		// Dead-lettered.
		e.deadLetter(q, got[1:2], "bad")
		require.Equal(t, store.QueueStats{Available: 3, Delayed: 2, DeadLetters: 1}, e.counts(q))

		// Redriven.
		n, err := store.DeadLetterRedrive(e.ctx, e.pool, store.RedriveParams{QueueID: q.ID, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, store.QueueStats{Available: 4, Delayed: 2}, e.counts(q))

		// Claimed and acked: m3, m2 and g0 go; g1 becomes available.
		got = e.claim(q, 10, time.Minute)
		require.Len(t, got, 3)
		require.Equal(t, store.QueueStats{Available: 1, InFlight: 3, Delayed: 2}, e.counts(q))
		require.Equal(t, []bool{true, true, true}, e.ack(q, receipts(got)...))
		require.Equal(t, store.QueueStats{Available: 1, Delayed: 2}, e.counts(q))
		got = e.claim(q, 10, time.Minute)
		require.Len(t, got, 1)
		require.Equal(t, "g", *got[0].Group)
		require.Equal(t, []bool{true}, e.ack(q, got[0].Receipt))
		require.Equal(t, store.QueueStats{Delayed: 2}, e.counts(q))
		require.GreaterOrEqual(t, e.stats(q).OldestAgeSeconds, int64(100), "m1 is still live")
		e.requireCountersExact(q)

		// Stats of several queues at once, unknown ids included.
		other := e.queue("other", store.QueuePatch{})
		e.send(other, msg(1))
		all, err := store.QueueStatsGet(e.ctx, e.pool, []int64{q.ID, other.ID, 424242})
		require.NoError(t, err)
		require.Len(t, all, 3)
		require.EqualValues(t, 2, all[q.ID].Delayed)
		require.EqualValues(t, 1, all[other.ID].Available)
		require.Equal(t, store.QueueStats{}, all[424242])
	})

	t.Run("ExactUnderConcurrency", func(t *testing.T) {
		// Producers and consumers (acking, nacking, dead-lettering, letting
		// leases run out) hammer the queue; afterwards the trigger-kept
		// counters equal the rows.
		t.Parallel()
		e, q := setup(t)
		const producers, sendsEach = 4, 40
		var (
			wg        sync.WaitGroup
			producing atomic.Int32
			sent      atomic.Int64
			acked     atomic.Int64
		)
		producing.Store(producers)
		for p := range producers {
			wg.Go(func() {
				defer producing.Add(-1)
				for i := range sendsEach {
					batch := []store.SendMessage{msg(i)}
					if i%3 == 0 {
						batch = append(batch, grouped("g"+string(rune('a'+p)), i), msg(i))
					}
					_, _, err := e.sender.Send(context.Background(), q.Name, batch)
					if !assertNoError(t, err) {
						return
					}
					sent.Add(int64(len(batch)))
				}
			})
		}
		for c := range 3 {
			wg.Go(func() {
				for round := 0; producing.Load() > 0 || round < 5; round++ {
					// Every other claim's lease runs out while the test runs.
					vt := time.Minute
					if round%2 == 1 {
						vt = 20 * time.Millisecond
					}
					msgs, _, err := store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: q, Max: 5, VisibilityTimeout: vt})
					if !assertNoError(t, err) {
						return
					}
					if len(msgs) == 0 {
						pause(time.Millisecond)
						continue
					}
					switch (round + c) % 4 {
					case 0, 1:
						var res []store.ReceiptResult
						res, _, err = store.MessageAck(e.ctx, e.pool, q.ID, receipts(msgs))
						for _, r := range res {
							if r.OK {
								acked.Add(1)
							}
						}
					case 2:
						_, _, err = store.MessageNack(e.ctx, e.pool, store.NackParams{Queue: q, Receipts: receipts(msgs), Delay: ptr(time.Duration(0))})
					case 3:
						_, _, err = store.MessageNack(e.ctx, e.pool, store.NackParams{Queue: q, Receipts: receipts(msgs[:1]), DeadLetter: true})
					}
					if !assertNoError(t, err) {
						return
					}
				}
			})
		}
		wg.Wait()
		require.False(t, t.Failed())
		require.Positive(t, sent.Load())
		require.Positive(t, e.deadLetters(q))
		e.requireCountersExact(q)
		require.Equal(t, sent.Load(), e.live(q)+e.deadLetters(q)+acked.Load(), "every sent message is live, dead or acked")
	})
}

// TestQueueDeleteContentOfPreviousReleaseRefused: the previous release's
// cleanup of a deleted queue deleted by a bare ctid, which on the
// partitioned ferry.messages names a row in every partition; an instance
// of that release running it during a rolling deploy is refused
// (migration 000019's trigger) and deletes nothing, while this release's
// cleanup deletes the queue's rows only.
func TestQueueDeleteContentOfPreviousReleaseRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gone := e.queue("gone", store.QueuePatch{})
	keep := e.queue("keep", store.QueuePatch{})
	e.send(gone, msg(1), msg(2))
	e.send(keep, msg(1), msg(2), store.SendMessage{Body: body(t, payload{Seq: 3}), Delay: ptr(time.Hour)})
	e.claim(keep, 1, time.Minute) // a row in another slot

	// The statement of store.QueueDeleteContent at 09b79ab, for ferry.messages.
	const previous = `/* ferry:queue_delete_messages */
		WITH RECURSIVE walk AS (
			(SELECT x.id, x.ctid FROM ferry.messages x WHERE x.queue_id = $1 AND x.id > 0 ORDER BY x.id LIMIT 1)
			UNION ALL
			SELECT n.* FROM walk w CROSS JOIN LATERAL (
				SELECT x.id, x.ctid FROM ferry.messages x WHERE x.queue_id = $1 AND x.id > w.id ORDER BY x.id LIMIT 1) n
		),
		victims AS MATERIALIZED (SELECT ctid FROM walk LIMIT $2)
		DELETE FROM ferry.messages x USING (SELECT ctid FROM victims LIMIT $2) v WHERE x.ctid = v.ctid`
	_, err := e.pool.Exec(e.ctx, previous, gone.ID, 100)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "0A000", pgErr.Code, "refused: %v", err)
	require.EqualValues(t, 2, e.live(gone))
	require.EqualValues(t, 3, e.live(keep))

	n, err := store.QueueDeleteContent(e.ctx, e.pool, gone.ID, 100)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Zero(t, e.live(gone))
	require.EqualValues(t, 3, e.live(keep), "this release's cleanup deletes the queue's rows only")
}
