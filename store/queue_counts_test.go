package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// The fold takes the committed counter rows of SQL API transactions into
// slot 128 without changing any sum, passes over the row of a
// transaction still open without waiting for it, and takes that row once
// it commits; with nothing to fold it writes nothing.
func TestQueueCountsFold(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "folded", store.QueuePatch{})
	e.send(q, msg(1)) // a REST slot row
	for i := range 3 {
		tx := e.begin()
		_, err := sqlSend(e.ctx, tx, q.Name, `[{"body": 1}, {"body": 2}]`)
		require.NoError(t, err)
		if i == 2 { // an ack in the same transaction: its row nets 1
			var acked int64
			require.NoError(t, tx.QueryRow(e.ctx, `SELECT count(*) FROM ferry.ack($1, (SELECT array_agg(receipt) FROM ferry.receive($1, 1, 60)))`,
				q.Name).Scan(&acked))
			require.EqualValues(t, 1, acked)
		}
		require.NoError(t, tx.Commit(e.ctx))
	}
	open := e.begin()
	_, err := sqlSend(e.ctx, open, q.Name, `[{"body": 7}]`)
	require.NoError(t, err)

	own := `SELECT count(*) FROM ferry.queue_counts WHERE queue_id = $1 AND slot < 0`
	totals := `SELECT sum(added) FROM ferry.queue_counts WHERE queue_id = $1`
	require.EqualValues(t, 3, e.count(own, q.ID))
	before, added := e.stats(q), e.count(totals, q.ID)
	require.EqualValues(t, 6, before.Available+before.InFlight)

	n, err := store.QueueCountsFold(e.ctx, e.pool, 10)
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "the three committed rows (the database is this test's)")
	require.Zero(t, e.count(own, q.ID), "the open transaction's row is not visible, so not folded")
	require.EqualValues(t, 5, e.count(`SELECT messages FROM ferry.queue_counts WHERE queue_id = $1 AND slot = 128`, q.ID))
	after := e.stats(q)
	require.Equal(t, [3]int64{before.Available, before.InFlight, before.Delayed}, [3]int64{after.Available, after.InFlight, after.Delayed},
		"the same depth")
	require.Equal(t, added, e.count(totals, q.ID), "the same totals")
	e.requireCountersExact(q)

	require.NoError(t, open.Commit(e.ctx))
	require.EqualValues(t, 1, e.count(own, q.ID))
	_, err = store.QueueCountsFold(e.ctx, e.pool, 10)
	require.NoError(t, err)
	require.Zero(t, e.count(own, q.ID))
	require.EqualValues(t, 6, e.count(`SELECT messages FROM ferry.queue_counts WHERE queue_id = $1 AND slot = 128`, q.ID))
	e.requireCountersExact(q)

	var (
		folded int64
		xid    *int64
	)
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT ferry.counts_fold(10), pg_current_xact_id_if_assigned()::text::bigint`).Scan(&folded, &xid))
	require.Zero(t, folded)
	require.Nil(t, xid, "a fold with nothing to take writes nothing")
}
