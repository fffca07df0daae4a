package store_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// tableHealth is the named table's entry of a health read.
func tableHealth(t *testing.T, h store.DBHealth, table string) store.TableHealth {
	t.Helper()
	for _, th := range h.Tables {
		if th.Table == table {
			return th
		}
	}
	require.Failf(t, "no table", "%s not in %v", table, h.Tables)
	return store.TableHealth{}
}

// TestDBHealthTables: every Ferry table is listed with plausible sizes;
// deleting rows with autovacuum off shows as dead tuples, and a VACUUM
// clears them and records when it ran.
func TestDBHealthTables(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// ferry.messages is partitioned: each partition is a table of its
	// own here. The messages are forwarded to COLD, which the claims then
	// leave (store/doc.go, # Held snapshots).
	_, err := e.pool.Exec(e.ctx, `ALTER TABLE ferry.messages_cold SET (autovacuum_enabled = off)`)
	require.NoError(t, err)
	q := e.queue("health", store.QueuePatch{})
	const n = 500
	msgs := make([]store.SendMessage, n)
	for i := range msgs {
		msgs[i] = msg(i)
	}
	e.send(q, msgs...)
	e.forwardAll()

	h, err := store.DBHealthRead(e.ctx, e.pool)
	require.NoError(t, err)
	for _, name := range []string{"ferry.messages_cold", "ferry.queues", "ferry.events", "ferry.group_partitions"} {
		th := tableHealth(t, h, name)
		require.Positive(t, th.TableBytes+th.IndexBytes, name)
		require.Positive(t, th.IndexBytes, "%s has a primary key", name)
	}
	before := tableHealth(t, h, "ferry.messages_cold")
	require.GreaterOrEqual(t, before.TableBytes, int64(8192))

	// Consume them all: each ack deletes its row (and the claim updated it).
	for claimed := 0; claimed < n; {
		got := e.claim(q, 100, time.Minute)
		require.NotEmpty(t, got)
		e.ack(q, receipts(got)...)
		claimed += len(got)
	}
	var dead store.TableHealth
	require.Eventually(t, func() bool { // the statistics are flushed within a second or so
		h, err := store.DBHealthRead(e.ctx, e.pool)
		require.NoError(t, err)
		dead = tableHealth(t, h, "ferry.messages_cold")
		return dead.DeadTuples >= n
	}, 30*time.Second, 50*time.Millisecond, "dead tuples after deleting %d rows", n)
	t.Logf("ferry.messages_cold after consuming %d: %+v", n, dead)
	require.Zero(t, e.live(q))

	_, err = e.pool.Exec(e.ctx, `VACUUM ferry.messages_cold`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		h, err := store.DBHealthRead(e.ctx, e.pool)
		require.NoError(t, err)
		th := tableHealth(t, h, "ferry.messages_cold")
		return th.DeadTuples < n && th.SinceVacuum != nil && *th.SinceVacuum < time.Minute
	}, 30*time.Second, 50*time.Millisecond, "vacuum clears the dead tuples and is recorded")
}

// TestDBHealthOldestTransaction: a transaction left open shows as the
// oldest transaction (at least as old as it is) and, while it holds a
// snapshot, as an xmin held back by as many transactions as ran since.
func TestDBHealthOldestTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h, err := store.DBHealthRead(e.ctx, e.pool)
	require.NoError(t, err)
	require.Less(t, h.OldestXactAge["backend"], 5*time.Second, "nothing is open yet: %v", h.OldestXactAge)
	for _, holder := range []string{"backend", "prepared_xact", "replication_slot"} {
		require.Contains(t, h.XminAge, holder)
	}

	held := e.newPool(1)
	tx, err := held.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	var one int
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT 1`).Scan(&one)) // takes the snapshot
	opened := time.Now()
	const writes = 5
	for range writes {
		_, err := e.pool.Exec(e.ctx, `SELECT txid_current()`) // a transaction with an xid each
		require.NoError(t, err)
	}
	time.Sleep(300 * time.Millisecond) // age, not synchronisation: the transaction must be older than this

	h, err = store.DBHealthRead(e.ctx, e.pool)
	require.NoError(t, err)
	age := time.Since(opened)
	t.Logf("held open for %v: oldest xact %v, xmin ages %v", age, h.OldestXactAge, h.XminAge)
	require.GreaterOrEqual(t, h.OldestXactAge["backend"], 300*time.Millisecond)
	require.GreaterOrEqual(t, h.XminAge["backend"], int64(writes), "the held snapshot's xmin is behind the writes since")

	require.NoError(t, tx.Rollback(e.ctx))
	h, err = store.DBHealthRead(e.ctx, e.pool)
	require.NoError(t, err)
	require.Less(t, h.OldestXactAge["backend"], 300*time.Millisecond, "released")
}
