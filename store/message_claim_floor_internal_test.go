package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The floor's rules: the first claim of a queue, and one at least
// ClaimFloorFull after the last that did, reads the whole queue; between
// them a claim starts ClaimFloorMargin below the oldest send time the
// last claims took, which only rises, except after a whole read.
func TestClaimFloorsRules(t *testing.T) {
	t.Parallel()
	var none *ClaimFloors
	at, full := none.floor(1, time.Now())
	require.True(t, full, "no floors: every claim reads the whole queue")
	require.Equal(t, negInfinity, at)

	f, t0 := NewClaimFloors(), time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	sent := func(ds ...time.Duration) []Message {
		var ms []Message
		for _, d := range ds {
			ms = append(ms, Message{SentAt: t0.Add(d)})
		}
		return ms
	}
	_, full = f.floor(1, t0)
	require.True(t, full, "a queue's first claim")
	f.took(1, true, sent(3*time.Second, 2*time.Second))
	at, full = f.floor(1, t0.Add(100*time.Millisecond))
	require.False(t, full)
	require.Equal(t, t0.Add(2*time.Second-ClaimFloorMargin), at, "the oldest taken, less the margin")
	f.took(1, false, sent(time.Second)) // an older message from the floor's margin: the floor stays
	at, _ = f.floor(1, t0.Add(200*time.Millisecond))
	require.Equal(t, t0.Add(2*time.Second-ClaimFloorMargin), at)
	f.took(1, false, nil)
	f.took(1, false, sent(5*time.Second))
	at, _ = f.floor(1, t0.Add(300*time.Millisecond))
	require.Equal(t, t0.Add(5*time.Second-ClaimFloorMargin), at, "rises")
	_, full = f.floor(2, t0.Add(300*time.Millisecond))
	require.True(t, full, "queues apart")

	at, full = f.floor(1, t0.Add(ClaimFloorFull))
	require.True(t, full, "a whole read each ClaimFloorFull")
	require.Equal(t, negInfinity, at)
	f.took(1, true, sent(time.Second)) // a late message found by the whole read
	at, full = f.floor(1, t0.Add(ClaimFloorFull+time.Millisecond))
	require.False(t, full)
	require.Equal(t, t0.Add(time.Second-ClaimFloorMargin), at, "a whole read lowers it")
}

// Behind a held snapshot, a claim from the floor enters the claim index at
// the queue's head: it reads a few entries where one from the start reads
// the entry of every message consumed since the snapshot was taken.
func TestClaimFloorSkipsConsumed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := oncePool(t)
	q, _, err := QueueUpsert(ctx, pool, "floor", QueuePatch{})
	require.NoError(t, err)
	held, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = held.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
	require.NoError(t, err)
	var xmin int64
	require.NoError(t, held.QueryRow(ctx, `SELECT txid_current()`).Scan(&xmin))

	// 2000 messages consumed, then 10 sent more than the floor's margin
	// later and consumed: the floor is theirs.
	const consumed = 2000
	floors := NewClaimFloors()
	consume := func(n int) {
		for done := 0; done < n; {
			got, _, err := MessageClaim(ctx, pool, ClaimParams{Queue: q, Max: 100, VisibilityTimeout: time.Minute, Floors: floors})
			require.NoError(t, err)
			require.NotEmpty(t, got)
			receipts := make([]Receipt, len(got))
			for i, m := range got {
				receipts[i] = m.Receipt
			}
			_, _, err = MessageAck(ctx, pool, q.ID, receipts)
			require.NoError(t, err)
			done += len(got)
		}
	}
	var sent time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&sent))
	sendN(t, pool, q, consumed)
	consume(consumed)
	awaitPastMargin(t, pool, sent)
	sendN(t, pool, q, 10)
	consume(10)
	sendN(t, pool, q, 10)

	floor, full := floors.floor(q.ID, time.Now())
	require.False(t, full, "within ClaimFloorFull of the first claim")
	fromFloor := claimEntriesRead(t, pool, q, floor)
	fromStart := claimEntriesRead(t, pool, q, negInfinity)
	require.GreaterOrEqual(t, fromStart, int64(consumed), "from the start: every consumed message's entry")
	require.Less(t, fromFloor, int64(consumed/10), "from the floor: the head")
}

// A message whose transaction read the clock long before it committed
// (an application's, calling ferry.send) is due below the floor that
// claims since then have raised: it is still received, by the whole read
// a claim makes each ClaimFloorFull.
func TestClaimFloorLateCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := oncePool(t)
	q, _, err := QueueUpsert(ctx, pool, "late", QueuePatch{})
	require.NoError(t, err)
	late, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = late.Rollback(ctx) }()
	sent, err := MessageSendTx(ctx, late, q, []SendMessage{{Body: json.RawMessage(`{"late":true}`)}})
	require.NoError(t, err)
	var at time.Time
	require.NoError(t, late.QueryRow(ctx, `SELECT visible_at FROM ferry.messages WHERE id = $1`, sent.Results[0].ID).Scan(&at))
	awaitPastMargin(t, pool, at)

	floors := NewClaimFloors()
	sendN(t, pool, q, 5)
	got, _, err := MessageClaim(ctx, pool, ClaimParams{Queue: q, Max: 10, VisibilityTimeout: time.Minute, Floors: floors})
	require.NoError(t, err)
	require.Len(t, got, 5, "the late message is not committed yet")
	floor, full := floors.floor(q.ID, time.Now())
	require.False(t, full)
	require.True(t, floor.After(at), "the floor is above the late message's due time")
	require.NoError(t, late.Commit(ctx))

	var found []Message
	require.Eventually(t, func() bool {
		got, _, err := MessageClaim(ctx, pool, ClaimParams{Queue: q, Max: 10, VisibilityTimeout: time.Minute, Floors: floors})
		require.NoError(t, err)
		found = append(found, got...)
		return len(found) > 0
	}, 5*time.Second, 20*time.Millisecond, "the late message is received")
	require.Len(t, found, 1)
	require.Equal(t, sent.Results[0].ID, found[0].ID)
}

// awaitPastMargin waits until the database's clock is more than the
// floor's margin past at.
func awaitPastMargin(t *testing.T, pool DBTX, at time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		var later bool
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT clock_timestamp() > $1::timestamptz + $2 * interval '1 ms'`,
			at, (ClaimFloorMargin+100*time.Millisecond).Milliseconds()).Scan(&later))
		return later
	}, 10*time.Second, 10*time.Millisecond, "the database's clock passes the margin")
}

// sendN sends n small messages to q.
func sendN(t *testing.T, pool DBTX, q Queue, n int) {
	t.Helper()
	msgs := make([]SendMessage, n)
	for i := range msgs {
		msgs[i] = SendMessage{Body: json.RawMessage(`{}`)}
	}
	require.NoError(t, pgx.BeginFunc(context.Background(), pool.(TxBeginner), func(tx pgx.Tx) error {
		_, err := MessageSendTx(context.Background(), tx, q, msgs)
		return err
	}))
}

// claimEntriesRead runs a claim of q's 10 oldest from floor in a
// transaction it rolls back, and returns how many index entries of
// ferry.messages' partitions the claim read (the backend's counts before
// and after it: they hold earlier transactions' until they are flushed).
func claimEntriesRead(t *testing.T, pool TxBeginner, q Queue, floor time.Time) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	read := func() int64 {
		var n int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)::bigint
			FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
			WHERE c.relnamespace = 'ferry'::regnamespace AND c.relname LIKE 'messages\_%'`).Scan(&n))
		return n
	}
	before := read()
	rows, err := tx.Query(ctx, `SELECT o_id FROM ferry.message_claim_from($1, 10, 100, 60000, NULL, $2)`, q.ID, floor)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 10, "the fresh messages")
	return read() - before
}
