package store_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

func TestSQLLimitsSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body, batch, err := store.SQLLimits(e.ctx, e.pool)
	require.NoError(t, err)
	require.Equal(t, []int{262144, 1000}, []int{body, batch}, "the migration's defaults are the REST defaults")

	require.NoError(t, store.SQLLimitsSet(e.ctx, e.pool, 1000, 7))
	body, batch, err = store.SQLLimits(e.ctx, e.pool)
	require.NoError(t, err)
	require.Equal(t, []int{1000, 7}, []int{body, batch})

	// The same limits again (a restart) write nothing: the row version
	// stays.
	xmin := func() uint32 {
		var x uint32
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT xmin::text::bigint FROM ferry.sql_limits`).Scan(&x))
		return x
	}
	before := xmin()
	require.NoError(t, store.SQLLimitsSet(e.ctx, e.pool, 1000, 7))
	require.Equal(t, before, xmin())
}

// lockedCounterRows reports whether some ferry.queue_counts row of q is
// locked by another transaction (one a REST write to q could wait for).
func (e *env) lockedCounterRows(q store.Queue) bool {
	e.t.Helper()
	_, err := e.pool.Exec(e.ctx, `SELECT FROM ferry.queue_counts WHERE queue_id = $1 FOR UPDATE NOWAIT`, q.ID)
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	require.ErrorAs(e.t, err, &pgErr)
	require.Equal(e.t, "55P03", pgErr.Code, "lock_not_available")
	return true
}

// A transaction that called ferry.counts_per_transaction (as every SQL API
// function that writes messages does) and is then held open by the
// application locks no depth counter row others write: its changes go to
// a row of its own, counted when it commits. Without it, the same writes hold a counter row to the end (the
// control case, which is what the SQL API must not do).
func TestCountsPerTransactionLockNoCounterRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("counted", store.QueuePatch{})
	e.send(q, msg(1), msg(2)) // counter rows exist, committed
	acked := e.claim(q, 1, time.Minute)
	require.Len(t, acked, 1)

	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	_, err = tx.Exec(e.ctx, `SELECT ferry.counts_per_transaction()`)
	require.NoError(t, err)
	_, err = store.MessageSendTx(e.ctx, tx, q, []store.SendMessage{msg(3), msg(4), msg(5)})
	require.NoError(t, err)
	// A savepoint rolled back takes its count with it.
	_, err = tx.Exec(e.ctx, `SAVEPOINT s`)
	require.NoError(t, err)
	_, err = store.MessageSendTx(e.ctx, tx, q, []store.SendMessage{msg(6)})
	require.NoError(t, err)
	_, err = tx.Exec(e.ctx, `ROLLBACK TO SAVEPOINT s`)
	require.NoError(t, err)
	res, err := store.MessageAckUngrouped(e.ctx, tx, q.ID, receipts(acked))
	require.NoError(t, err)
	require.True(t, res[0].OK)

	require.False(t, e.lockedCounterRows(q), "the open transaction locks none of the queue's counter rows")
	e.send(q, msg(7)) // a REST send meanwhile, on whatever slot
	require.Equal(t, int64(3), e.stats(q).Available+e.stats(q).InFlight, "uncommitted changes are not counted yet")

	require.NoError(t, tx.Commit(e.ctx))
	e.requireCountersExact(q)
	require.Equal(t, int64(5), e.live(q)) // 2 + 1 (REST) + 3 (tx) - 1 (acked)
	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM ferry.queue_counts WHERE queue_id = $1 AND slot < 0`, q.ID),
		"the transaction's changes, in a row of its own")

	// A rolled-back transaction counts nothing.
	tx, err = e.pool.Begin(e.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(e.ctx, `SELECT ferry.counts_per_transaction()`)
	require.NoError(t, err)
	_, err = store.MessageSendTx(e.ctx, tx, q, []store.SendMessage{msg(8)})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(e.ctx))
	e.requireCountersExact(q)

	// The control: the same send without it holds a counter row.
	tx, err = e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	_, err = store.MessageSendTx(e.ctx, tx, q, []store.SendMessage{msg(9)})
	require.NoError(t, err)
	require.True(t, e.lockedCounterRows(q))
}

// Transactions counted at commit that touch the same queues in opposite
// orders, from backends of the same counter slot or not, all commit: at
// commit each adds its deltas in queue order, the order every counter
// write takes its rows in.
func TestCountsPerTransactionCommitInQueueOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.queue("counted-a", store.QueuePatch{})
	b := e.queue("counted-b", store.QueuePatch{})
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(e.ctx, `SELECT ferry.counts_per_transaction()`); err != nil {
					return err
				}
				first, second := a, b
				if i%2 == 1 {
					first, second = b, a
				}
				for _, q := range []store.Queue{first, second} {
					if _, err := store.MessageSendTx(e.ctx, tx, q, []store.SendMessage{msg(i)}); err != nil {
						return err
					}
				}
				return nil
			})
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	e.requireCountersExact(a)
	e.requireCountersExact(b)
	require.Equal(t, int64(n), e.live(a))
}

// The fixed Notifier keys are not push configuration wakes: a Pusher
// that took RelayWakeKey for one swept its targets at every SQL publish.
func TestFixedWakeKeysAreNoPushConfigWakes(t *testing.T) {
	t.Parallel()
	for _, k := range []int64{store.KeysWakeKey, store.RelayWakeKey, store.KeyCreatedWakeKey, store.TopicWakeKey(7), 7} {
		require.False(t, store.IsPushConfigWakeKey(k), "%d", k)
	}
	for _, q := range []int64{1, 7, 1 << 40} {
		require.True(t, store.IsPushConfigWakeKey(store.PushConfigWakeKey(q)), "%d", q)
	}
}

// max_depth counts what the same transaction sent before: those messages
// are in the transaction's own counter row, which only it sees before its
// commit, and without them one transaction could send any number of batches that
// each fit alone.
func TestSQLSendMaxDepthCountsTheTransactionsOwnSends(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "bounded", store.QueuePatch{MaxDepth: ptr[int64](3)})
	tx := e.begin()
	_, err := sqlSend(e.ctx, tx, q.Name, `[{"body": 1}, {"body": 2}]`)
	require.NoError(t, err)
	_, err = sqlSend(e.ctx, tx, q.Name, `[{"body": 3}]`)
	require.NoError(t, err)
	_, err = sqlSend(e.ctx, tx, q.Name, `[{"body": 4}]`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "FR429", pgErr.Code, pgErr.Message)
	require.Equal(t, "ferry: queue_full: the queue holds 3 of at most 3 messages; retry later", pgErr.Message)
}

// The SQL API's functions do not depend on the caller's settings: with
// standard_conforming_strings off, a backslash in a plain string literal
// would change the size check's pattern (an invalid regular expression,
// not FR413).
func TestSQLFunctionsIgnoreCallerStringSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, _, err := store.TopicUpsert(e.ctx, e.pool, "sized", store.TopicPatch{})
	require.NoError(t, err)
	tx := e.begin()
	_, err = tx.Exec(e.ctx, `SET LOCAL standard_conforming_strings = off`)
	require.NoError(t, err)
	_, err = tx.Exec(e.ctx, `SELECT * FROM ferry.publish('sized', 't', to_jsonb(repeat('x', 300000)))`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "FR413", pgErr.Code, pgErr.Message)
}
