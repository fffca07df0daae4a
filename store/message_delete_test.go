package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/store"
)

// A purge larger than one batch removes everything that was there, keeps
// counters exact, and leaves groups usable: a message sent to a purged
// group afterwards is its head and can be received.
func TestPurgeInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	q, _, err := store.QueueUpsert(ctx, pool, "big", store.QueuePatch{})
	require.NoError(t, err)
	s := store.NewSender(pool, store.SenderConfig{Workers: 2})
	defer s.Close()
	batch := make([]store.SendMessage, 1000)
	for i := range batch {
		batch[i] = store.SendMessage{Body: json.RawMessage(`1`)}
		if i%10 == 0 {
			batch[i].Group = "g"
		}
	}
	for range 12 { // 12,000 messages: more than two purge batches
		_, _, err := s.Send(ctx, "big", batch)
		require.NoError(t, err)
	}
	inFlight, _, err := store.MessageClaim(ctx, pool, store.ClaimParams{Queue: q, Max: 50, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.NotEmpty(t, inFlight)

	require.NoError(t, store.MessagePurge(ctx, pool, q.ID))

	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, q.ID).Scan(&left))
	require.Zero(t, left)
	stats, err := store.QueueStatsGet(ctx, pool, []int64{q.ID})
	require.NoError(t, err)
	require.Equal(t, store.QueueStats{}, stats[q.ID], "counters follow the purge")
	res, _, err := store.MessageAck(ctx, pool, q.ID, []store.Receipt{inFlight[0].Receipt})
	require.NoError(t, err)
	require.False(t, res[0].OK, "receipts of purged messages are stale")

	sent, _, err := s.Send(ctx, "big", []store.SendMessage{{Body: json.RawMessage(`"after"`), Group: "g"}})
	require.NoError(t, err)
	got, _, err := store.MessageClaim(ctx, pool, store.ClaimParams{Queue: q, Max: 10, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1, "a message sent to a purged group is its head")
	require.Equal(t, sent[0].ID, got[0].ID)
}
