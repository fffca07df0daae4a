package store_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// The SQL API's producers (store/definitions/sqlapi_send.sql):
// ferry.send and ferry.send_batch in the caller's own transaction. The
// dual-path behaviour test (every case through REST and SQL) is
// handlers/sqlapi_send_test.go; these are the transactional properties.

// sqlSent is one row of ferry.send or ferry.send_batch.
type sqlSent struct {
	ID        int64
	Duplicate bool
}

// sqlSend calls ferry.send_batch(q, messages) on db (a transaction or a
// connection) and returns its rows.
func sqlSend(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, q, messages string,
) ([]sqlSent, error) {
	rows, err := db.Query(ctx, `SELECT id, duplicate FROM ferry.send_batch($1, $2::jsonb)`, q, messages)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (sqlSent, error) {
		var (
			id  string
			out sqlSent
		)
		if err := r.Scan(&id, &out.Duplicate); err != nil {
			return out, err
		}
		n, err := strconv.ParseInt(id, 10, 64)
		out.ID = n
		return out, err
	})
}

// begin starts a transaction on the env's pool, rolled back at cleanup if
// the test leaves it open.
func (e *env) begin() pgx.Tx {
	e.t.Helper()
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// TestSQLSendCommitOrRollback: a SQL send exists exactly when its
// transaction commits. Rolled back: no message, no dedup claim, depth and
// counter rows as before. Committed: the messages, the dedup claim, and
// the depth right at once, from the transaction's own counter row (a slot
// below zero, apart from REST's), and nothing for the commit to do.
func TestSQLSendCommitOrRollback(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "sql-tx", store.QueuePatch{})
	batch := `[{"body": {"seq": 1}}, {"body": {"seq": 2}, "dedup_id": "d", "group": "g"}, {"body": 3, "delay_seconds": 60}]`
	slots := `SELECT count(*) FROM ferry.queue_counts WHERE queue_id = $1`

	tx := e.begin()
	sent, err := sqlSend(e.ctx, tx, q.Name, batch)
	require.NoError(t, err)
	require.Len(t, sent, 3)
	require.NoError(t, tx.Rollback(e.ctx))
	require.Zero(t, e.live(q))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.dedup WHERE queue_id = $1`, q.ID))
	require.Zero(t, e.count(slots, q.ID), "no counter row")
	require.Equal(t, store.QueueStats{}, e.counts(q))

	tx = e.begin()
	sent, err = sqlSend(e.ctx, tx, q.Name, batch)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(e.ctx))
	require.Equal(t, store.QueueStats{Available: 2, Delayed: 1}, e.counts(q), "depth right after the commit")
	require.EqualValues(t, 3, e.live(q))
	require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.queue_counts WHERE queue_id = $1 AND slot < 0 AND messages = 3`, q.ID),
		"the transaction's changes, in a row of its own")
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.at_commit`), "nothing for a later commit")
	require.EqualValues(t, 1, e.count(slots, q.ID))
	e.requireCountersExact(q)
	again := e.send(q, deduped("d", 9))
	require.Equal(t, store.SendResult{ID: sent[1].ID, Duplicate: true}, again[0], "the committed dedup claim answers REST")
}

// TestSQLSendSavepoint: a send inside a savepoint that is rolled back is
// gone (its message, its dedup claim, its group's lock and its count),
// while the transaction's other sends stay.
func TestSQLSendSavepoint(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "sql-savepoint", store.QueuePatch{})
	tx := e.begin()
	before, err := sqlSend(e.ctx, tx, q.Name, `[{"body": "before"}]`)
	require.NoError(t, err)
	_, err = tx.Exec(e.ctx, `SAVEPOINT s`)
	require.NoError(t, err)
	_, err = sqlSend(e.ctx, tx, q.Name, `[{"body": "inside", "dedup_id": "x", "group": "g"}, {"body": "inside too"}]`)
	require.NoError(t, err)
	_, err = tx.Exec(e.ctx, `ROLLBACK TO SAVEPOINT s`)
	require.NoError(t, err)
	after, err := sqlSend(e.ctx, tx, q.Name, `[{"body": "after", "group": "g"}]`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(e.ctx))

	require.ElementsMatch(t, []int64{before[0].ID, after[0].ID}, e.int64s(`SELECT id FROM ferry.messages WHERE queue_id = $1`, q.ID))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.dedup WHERE queue_id = $1`, q.ID))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND waiting`, q.ID),
		"the group's message after the savepoint is its head: the rolled-back one never was")
	e.requireCountersExact(q)
	require.False(t, e.send(q, deduped("x", 1))[0].Duplicate)
}

// TestSQLSendConcurrentDedup: two transactions send the same dedup id; the
// second waits for the first, then is a duplicate of its message if it
// committed, a fresh message if it rolled back.
func TestSQLSendConcurrentDedup(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "sql-dedup", store.QueuePatch{})
	for _, commit := range []bool{true, false} {
		dedup := `[{"body": 1, "dedup_id": "same-` + strconv.FormatBool(commit) + `"}]`
		first := e.begin()
		a, err := sqlSend(e.ctx, first, q.Name, dedup)
		require.NoError(t, err)
		var firstPID uint32
		require.NoError(t, first.QueryRow(e.ctx, `SELECT pg_backend_pid()`).Scan(&firstPID))

		type outcome struct {
			sent []sqlSent
			err  error
		}
		done := make(chan outcome, 1)
		go func() {
			tx, err := e.pool.Begin(context.Background())
			if err != nil {
				done <- outcome{err: err}
				return
			}
			defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
			sent, err := sqlSend(context.Background(), tx, q.Name, dedup)
			if err == nil {
				err = tx.Commit(context.Background())
			}
			done <- outcome{sent, err}
		}()
		// The second send waits on the first's dedup row.
		require.Eventually(t, func() bool {
			return e.count(`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, firstPID) == 1
		}, 10*time.Second, time.Millisecond, "the second send must wait for the first")
		select {
		case o := <-done:
			t.Fatalf("the second send did not wait: %+v", o)
		default:
		}
		if commit {
			require.NoError(t, first.Commit(e.ctx))
		} else {
			require.NoError(t, first.Rollback(e.ctx))
		}
		o := <-done
		require.NoError(t, o.err)
		require.Len(t, o.sent, 1)
		if commit {
			require.Equal(t, sqlSent{ID: a[0].ID, Duplicate: true}, o.sent[0])
		} else {
			require.False(t, o.sent[0].Duplicate)
			require.NotEqual(t, a[0].ID, o.sent[0].ID)
		}
	}
	require.EqualValues(t, 2, e.live(q))
	e.requireCountersExact(q)
}

// TestSQLSendOrphanedByDelete: a queue deleted while a SQL send to it is
// uncommitted (the send holds no lock a delete waits for) leaves that
// send's messages as orphans once it commits; the orphan sweep finds them
// by their counter row and removes them, and then the counter row.
func TestSQLSendOrphanedByDelete(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "sql-orphan", store.QueuePatch{})
	tx := e.begin()
	_, err := sqlSend(e.ctx, tx, q.Name, `[{"body": 1}, {"body": 2, "dedup_id": "d"}]`)
	require.NoError(t, err)

	// The delete and the cleanup of what it could see do not wait for tx.
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	del, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	defer del.Rollback(e.ctx) //nolint:errcheck // a no-op after Commit
	_, err = store.QueueDelete(ctx, del, q.Name)
	require.NoError(t, err)
	require.NoError(t, del.Commit(ctx))
	n, err := store.QueueDeleteContent(ctx, e.pool, q.ID, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	orphans, err := store.QueueOrphans(ctx, e.pool, 10)
	require.NoError(t, err)
	require.NotContains(t, orphans, q.ID, "nothing of the queue is visible yet")

	require.NoError(t, tx.Commit(e.ctx))
	require.EqualValues(t, 2, e.live(q), "the orphans")
	orphans, err = store.QueueOrphans(e.ctx, e.pool, 10)
	require.NoError(t, err)
	require.Contains(t, orphans, q.ID)
	for {
		n, err := store.QueueDeleteContent(e.ctx, e.pool, q.ID, 100)
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	require.Zero(t, e.live(q))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.dedup WHERE queue_id = $1`, q.ID))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.queue_counts WHERE queue_id = $1`, q.ID))
}

// TestSQLSendRoles: a login role granted only ferry_producer can send, and
// gets 42501 on Ferry's tables and on the internal functions.
func TestSQLSendRoles(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "sql-roles", store.QueuePatch{})
	tx := e.begin()
	role := "producer_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, s := range []string{`CREATE ROLE ` + role + ` LOGIN`, `GRANT ferry_producer TO ` + role, `SET LOCAL ROLE ` + role} {
		_, err := tx.Exec(e.ctx, s)
		require.NoError(t, err, s)
	}
	sent, err := sqlSend(e.ctx, tx, q.Name, `[{"body": 1, "dedup_id": "r"}]`)
	require.NoError(t, err)
	require.Len(t, sent, 1)
	var id string
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT id FROM ferry.send($1, '2')`, q.Name).Scan(&id))
	for _, s := range []string{
		`SELECT count(*) FROM ferry.messages`,
		`SELECT count(*) FROM ferry.dedup`,
		`SELECT count(*) FROM ferry.queues`,
		`INSERT INTO ferry.messages (queue_id, id, visible_at, body) VALUES (1, 1, now(), '1')`,
		`SELECT * FROM ferry.message_send_plain(1, '{1}', '{NULL}', '{0}', '{NULL}')`,
		`SELECT * FROM ferry.send_messages('q', '[]', false)`,
	} {
		_, err := tx.Exec(e.ctx, `SAVEPOINT p`)
		require.NoError(t, err)
		_, err = tx.Exec(e.ctx, s)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%s: %v", s, err)
		require.Equal(t, "42501", pgErr.Code, "%s: %v", s, err)
		_, err = tx.Exec(e.ctx, `ROLLBACK TO SAVEPOINT p`)
		require.NoError(t, err)
	}
}

// TestSQLSendIsolation: a send to a message group or to a queue with a
// max_depth must see what committed while it waited for the group's or
// queue's lock, which a REPEATABLE READ or SERIALIZABLE snapshot (taken
// before the wait) cannot: it is refused (FR400) rather than filing a
// second head of a group or passing the max_depth. Other sends work at
// any isolation level.
func TestSQLSendIsolation(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "sql-isolation", store.QueuePatch{})
	bounded := e.queue("sql-isolation-bounded", store.QueuePatch{MaxDepth: ptr[int64](5)})
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		for _, c := range []struct {
			queue, msgs string
			refused     bool
		}{
			{q.Name, `[{"body": 1, "dedup_id": "` + string(level) + `"}, {"body": 2, "delay_seconds": 5}]`, false},
			{q.Name, `[{"body": 1}, {"body": 2, "group": "g"}]`, true},
			{bounded.Name, `[{"body": 1}]`, true},
		} {
			tx, err := e.pool.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: level})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			_, err = sqlSend(e.ctx, tx, c.queue, c.msgs)
			if !c.refused {
				require.NoError(t, err, "%s: %s", level, c.msgs)
				require.NoError(t, tx.Commit(e.ctx))
				continue
			}
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "%s: %s: %v", level, c.msgs, err)
			require.Equal(t, "FR400", pgErr.Code, "%s: %s", level, pgErr.Message)
			require.Contains(t, pgErr.Message, "ferry: invalid_request: ")
			require.Contains(t, pgErr.Message, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
			require.NoError(t, tx.Rollback(e.ctx))
		}
	}
	require.EqualValues(t, 4, e.live(q))
	require.Zero(t, e.live(bounded))
}

// ferry.send_check_shape passes a batch of body-only messages without a
// statement (a jsonpath test in strict mode): an element that is itself
// an array, which lax mode would unwrap into its members, still gets the
// shape's error, not a later check's.
func TestSQLSendShapeFastExit(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "shaped", store.QueuePatch{})
	for batch, want := range map[string]string{
		`[[{"body": 1}]]`:             "ferry: invalid_request: messages[0]: must be an object, not array",
		`[{"body": 1}, []]`:           "ferry: invalid_request: messages[1]: must be an object, not array",
		`[{"body": 1}, {"bdy": 2}]`:   "ferry: invalid_request: messages[1].bdy: unknown field (member names are case-sensitive)",
		`[{"body": 1}, {"body": {}}]`: "",
	} {
		tx := e.begin()
		_, err := sqlSend(e.ctx, tx, q.Name, batch)
		if want == "" {
			require.NoError(t, err, batch)
			continue
		}
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, batch)
		require.Equal(t, want, pgErr.Message, batch)
	}
}
