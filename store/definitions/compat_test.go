package definitions_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
	"github.com/ferry-mq/ferry/store/definitions"
)

// A new binary serves on the functions as an older release left them (in
// a rolling deploy whose new release has not installed its definitions
// yet, or one that found a newer generation): the store's send, claim,
// ack, nack, extend, dead letter and publish with fan-out, on a database
// migrated by the migrations alone.
func TestStoreOnMigrationsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, migratedOnly(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// Migration 000019 drops the claim and the promotion that an older
	// release left: they join rows by a bare ctid, which on the
	// partitioned ferry.messages names rows of other queues. Until this
	// release installs them, a claim fails (TestClaimAfterRingMigrationFails
	// shows it); these are this release's, with the claim token they write.
	installDefinitions(t, pool, "receipts.sql", "ferry.claim_token")
	installDefinitions(t, pool, "message_claim.sql", "ferry.message_claim_from")
	installDefinitions(t, pool, "message_claim.sql", "ferry.message_claim")
	installDefinitions(t, pool, "message_settle.sql", "ferry.message_promote")

	one, depth := 1, int64(10)
	q, _, err := store.QueueUpsert(ctx, pool, "q", store.QueuePatch{MaxReceives: &one, MaxDepth: &depth})
	require.NoError(t, err)
	msgs := []store.SendMessage{
		{Body: json.RawMessage(`{"n":1}`)},
		{Body: json.RawMessage(`{"n":2}`), Group: "g", DedupID: "d"},
		{Body: json.RawMessage(`{"n":3}`), Group: "g"},
		{Body: json.RawMessage(`{"n":4}`), DedupID: "d"},
	}
	var sent store.SendTxResult
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		sent, err = store.MessageSendTx(ctx, tx, q, msgs)
		return err
	}))
	require.Len(t, sent.Results, 4)
	require.True(t, sent.Results[3].Duplicate)
	require.Equal(t, sent.Results[1].ID, sent.Results[3].ID)

	got, dead, err := store.MessageClaim(ctx, pool, store.ClaimParams{Queue: q, Max: 10, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.Zero(t, dead)
	require.Len(t, got, 2, "the plain message and the group's head; the group's second waits")
	extended, err := store.MessageExtend(ctx, pool, q.ID, []store.Receipt{got[0].Receipt}, time.Hour)
	require.NoError(t, err)
	require.True(t, extended[0].OK)
	acked, promoted, err := store.MessageAck(ctx, pool, q.ID, []store.Receipt{got[1].Receipt})
	require.NoError(t, err)
	require.True(t, acked[0].OK)
	require.Equal(t, got[1].Group != nil, promoted, "an acked group head promotes the group's next")
	nacked, deadLettered, err := store.MessageNack(ctx, pool, store.NackParams{Queue: q, Receipts: []store.Receipt{got[0].Receipt}})
	require.NoError(t, err)
	require.True(t, nacked[0].OK)
	require.Equal(t, 1, deadLettered, "max_receives 1: the nack of the last receive dead-letters")
	stale, err := store.MessageExtend(ctx, pool, q.ID, []store.Receipt{got[0].Receipt}, time.Hour)
	require.NoError(t, err)
	require.False(t, stale[0].OK)

	topic, _, err := store.TopicUpsert(ctx, pool, "t", store.TopicPatch{})
	require.NoError(t, err)
	sub, _, _, err := store.SubscriptionUpsert(ctx, pool, topic, "s", store.SubscriptionPatch{})
	require.NoError(t, err)
	published, _, err := store.EventPublish(ctx, pool, topic, []store.PublishEvent{{Type: "x", Data: json.RawMessage(`{"a":1}`)}})
	require.NoError(t, err)
	require.Len(t, published, 1)
	delivered, _, err := store.MessageClaim(ctx, pool, store.ClaimParams{Queue: sub.Queue, Max: 10, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.Len(t, delivered, 1)
	require.Equal(t, published[0].ID, *delivered[0].EventID)
}

// installDefinitions runs, from this release's definition file, the
// CREATE of function fn through its REVOKE.
func installDefinitions(t *testing.T, pool *pgxpool.Pool, file, fn string) {
	t.Helper()
	b, err := fs.ReadFile(definitions.Files(), file)
	require.NoError(t, err)
	text := string(b)
	from := strings.Index(text, "CREATE OR REPLACE FUNCTION "+fn+"(")
	require.GreaterOrEqual(t, from, 0, "%s in %s", fn, file)
	revoke := "REVOKE ALL ON FUNCTION " + fn + "("
	to := strings.Index(text[from:], revoke)
	require.GreaterOrEqual(t, to, 0, "the REVOKE of %s", fn)
	end := from + to + strings.Index(text[from+to:], ";") + 1
	_, err = pool.Exec(context.Background(), text[from:end])
	require.NoError(t, err)
}

// TestClaimAfterRingMigrationFails: between migration 000019 and the
// install of the definitions, a claim (an older release's instance calls
// the same function) fails instead of claiming by a bare ctid.
func TestClaimAfterRingMigrationFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, migratedOnly(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `SELECT * FROM ferry.message_claim(1, 10, 5, 1000, NULL)`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42883", pgErr.Code, "undefined function: %v", err)
}
