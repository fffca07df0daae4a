package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// The SQL API's consumers and isolation (migration 000011): ferry.receive,
// ferry.ack, ferry.nack and ferry.extend lock messages and groups and must
// see what committed while they waited for those locks, which a REPEATABLE
// READ or SERIALIZABLE snapshot, taken before, cannot. They refuse such a
// transaction with FR400, as a send to a message group does.

// consumerCall is one SQL API consumer call on queue q with receipt r.
type consumerCall struct {
	name string
	sql  string
	args func(q, r string) []any
}

var consumerCalls = []consumerCall{
	{"receive", `SELECT receipt FROM ferry.receive($1, 10)`, func(q, _ string) []any { return []any{q} }},
	{"ack", `SELECT status FROM ferry.ack($1, $2)`, func(q, r string) []any { return []any{q, []string{r}} }},
	{"nack", `SELECT status FROM ferry.nack($1, $2, '{"dead_letter": true}')`, func(q, r string) []any { return []any{q, []string{r}} }},
	{"extend", `SELECT status FROM ferry.extend($1, $2, 600)`, func(q, r string) []any { return []any{q, []string{r}} }},
}

// beginAt starts a transaction at level on the env's pool, rolled back at
// cleanup if the test leaves it open.
func (e *env) beginAt(level pgx.TxIsoLevel) pgx.Tx {
	e.t.Helper()
	tx, err := e.pool.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: level})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// requireReadCommittedRefusal requires err to be the refusal of call in a
// transaction at level: FR400, with the fix in its detail.
func requireReadCommittedRefusal(t *testing.T, err error, call string, level pgx.TxIsoLevel) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "ferry.%s at %s: want FR400, got %v", call, level, err)
	require.Equal(t, "FR400", pgErr.Code, "ferry.%s at %s: %s", call, level, pgErr.Message)
	require.Contains(t, pgErr.Message, "ferry: invalid_request: ferry."+call+
		" must run in a READ COMMITTED transaction, not "+strings.ToUpper(string(level)))
	require.Contains(t, pgErr.Message, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
}

// TestSQLConsumeReadCommittedOnly: each consumer call, in a REPEATABLE
// READ and in a SERIALIZABLE transaction, is refused and changes nothing
// (the message stays leased to its receipt, in flight); in READ COMMITTED
// each works.
func TestSQLConsumeReadCommittedOnly(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "sql-consume-isolation", store.QueuePatch{})
	m := e.sendClaimed(q, grouped("g", 1), time.Hour)[0]
	e.send(q, grouped("g", 2), msg(3))
	receipt := m.Receipt.String()
	before := e.counts(q)
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		for _, c := range consumerCalls {
			tx := e.beginAt(level)
			_, err := tx.Exec(e.ctx, c.sql, c.args(q.Name, receipt)...)
			requireReadCommittedRefusal(t, err, c.name, level)
			require.NoError(t, tx.Rollback(e.ctx))
		}
	}
	require.Equal(t, before, e.counts(q), "nothing changed")
	require.EqualValues(t, 1, before.InFlight)
	require.Equal(t, []bool{true}, e.extend(q, time.Hour, m.Receipt), "the receipt is still current")

	tx := e.beginAt(pgx.ReadCommitted)
	for _, c := range consumerCalls {
		rows, err := tx.Query(e.ctx, c.sql, c.args(q.Name, receipt)...)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err, "ferry.%s in READ COMMITTED", c.name)
		require.Len(t, got, 1, "ferry.%s in READ COMMITTED", c.name)
	}
}

// TestSQLConsumeGroupNeverFrozen is issue 18's scenario: a consumer's
// REPEATABLE READ or SERIALIZABLE transaction receives the head of a
// message group, a REST send to the group arrives, and the consumer acks
// (or nacks with dead_letter) and commits. Before migration 000011 the
// settle promoted the group's next message from the transaction's old
// snapshot, which did not see the new one: the group was left without a
// head, receives answered [] while the stats said available: 1, forever.
// Now the receive is refused, and the group goes on: the same work in
// READ COMMITTED, with the REST send arriving at the same point, delivers
// every message of the group in order.
func TestSQLConsumeGroupNeverFrozen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		level  pgx.TxIsoLevel
		settle string
		dead   int64
	}{
		{pgx.RepeatableRead, `SELECT status FROM ferry.ack($1, $2)`, 0},
		{pgx.Serializable, `SELECT status FROM ferry.nack($1, $2, '{"dead_letter": true}')`, 1},
	} {
		e, q := newQueueEnv(t, "sql-frozen-"+string(c.level[:4]), store.QueuePatch{})
		e.send(q, grouped("g", 1))
		for _, level := range []pgx.TxIsoLevel{c.level, pgx.ReadCommitted} {
			tx := e.beginAt(level)
			var receipt string
			err := tx.QueryRow(e.ctx, `SELECT receipt FROM ferry.receive($1)`, q.Name).Scan(&receipt)
			if level != pgx.ReadCommitted {
				requireReadCommittedRefusal(t, err, "receive", level)
				require.NoError(t, tx.Rollback(e.ctx))
				continue
			}
			require.NoError(t, err)
			e.send(q, grouped("g", 2)) // over REST, while the consumer's transaction is open
			var status string
			require.NoError(t, tx.QueryRow(e.ctx, c.settle, q.Name, []string{receipt}).Scan(&status))
			require.Equal(t, "ok", status)
			require.NoError(t, tx.Commit(e.ctx))
		}
		next := e.claim(q, 10, time.Minute)
		require.Len(t, next, 1, "%s: the group's next message has become its head", c.level)
		require.Equal(t, 2, decode(t, next[0].Body).Seq)
		require.Equal(t, []bool{true}, e.ack(q, next[0].Receipt))
		require.Equal(t, store.QueueStats{DeadLetters: c.dead}, e.counts(q), "%s: nothing left behind", c.level)
	}
}
