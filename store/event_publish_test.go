package store_test

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// publishTxEvents is a publish of keyed events (so partitions do not
// depend on spreading): two ordered keys, a repeat within the batch, an id
// published before (old) and an event the filtered subscription skips.
func publishTxEvents() []store.PublishEvent {
	ev := func(id, typ, key string) store.PublishEvent {
		return store.PublishEvent{ID: id, Type: typ, Key: ptr(key), Data: json.RawMessage(`{"id":"` + id + `"}`)}
	}
	return []store.PublishEvent{
		ev("a", "order.created", "k1"), ev("b", "order.paid", "k2"), ev("old", "order.created", "k1"),
		ev("a", "order.created", "k1"), ev("c", "audit.seen", "k1"), ev("d", "order.paid", "k1"),
	}
}

// EventPublishTx in a rolled-back transaction leaves nothing: no event,
// no offset taken, no dedup claim, no delivery. In a committed one it is
// a REST publish: the same results as the Publisher's for the same events
// on a twin topic (dedup, dense offsets), the same deliveries to a
// filtered subscription, and it says whom to wake.
func TestEventPublishTx(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	setup := func(name string) (store.Topic, store.Subscription) {
		tp := e.topic(name, store.TopicPatch{Partitions: ptr(2)})
		s, _ := e.subscribe(tp, name+"-orders", `{"types": ["order.#"]}`, store.SubscriptionPatch{Ordered: ptr(true)})
		e.publish(tp, store.PublishEvent{ID: "old", Type: "order.created", Key: ptr("k1")})
		return tp, s
	}
	rest, restSub := setup("rest")
	tx, txSub := setup("tx")
	headsBefore := e.offsets(tx)
	dedupBefore := e.count(`SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1`, tx.ID)
	require.Len(t, e.deliveries(txSub.ID), 1)

	// Rolled back: nothing stays.
	dbtx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	out, err := store.EventPublishTx(e.ctx, dbtx, store.PublishParams{Topic: tx, Events: publishTxEvents()})
	require.NoError(t, err)
	require.Len(t, out.Results, 6)
	require.NoError(t, dbtx.Rollback(e.ctx))
	require.Equal(t, headsBefore, e.offsets(tx), "no offset taken")
	require.Equal(t, dedupBefore, e.count(`SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1`, tx.ID), "no id claimed")
	require.Len(t, e.allEvents(tx), 1)
	require.Len(t, e.deliveries(txSub.ID), 1)

	// The same events through the Publisher (as POST .../events) and
	// through EventPublishTx, committed.
	p := store.NewPublisher(e.pool, store.PublisherConfig{})
	t.Cleanup(p.Close)
	want, err := p.Publish(e.ctx, rest, publishTxEvents())
	require.NoError(t, err)
	dbtx, err = e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer dbtx.Rollback(e.ctx) //nolint:errcheck // a no-op after Commit
	out, err = store.EventPublishTx(e.ctx, dbtx, store.PublishParams{Topic: tx, Events: publishTxEvents()})
	require.NoError(t, err)
	// Published again in the same transaction: duplicates of its own.
	again, err := store.EventPublishTx(e.ctx, dbtx, store.PublishParams{Topic: tx, Events: publishTxEvents()[:2]})
	require.NoError(t, err)
	require.NoError(t, dbtx.Commit(e.ctx))

	require.Equal(t, want, out.Results)
	require.Equal(t, []bool{false, false, true, true, false, false}, duplicates(out.Results))
	require.Equal(t, place(out.Results[0]), place(out.Results[3]), "a repeat answers its first")
	for i, r := range again.Results {
		require.Equal(t, place(out.Results[i]), place(r))
		require.True(t, r.Duplicate)
	}
	// Dense offsets: per partition, 0 (old) and then one after another.
	heads := map[int]int64{}
	for _, ev := range e.allEvents(tx) {
		heads[ev.Partition]++
	}
	for _, o := range e.offsets(tx) {
		require.Equal(t, heads[o.Partition]-1, o.HeadOffset, "partition %d", o.Partition)
	}
	require.Len(t, e.allEvents(tx), 5, "old, a, b, c, d")
	// The filtered subscription got the order events, as REST's did.
	ids := func(s store.Subscription) []string {
		var out []string
		for _, d := range e.deliveries(s.ID) {
			out = append(out, d.EventID)
		}
		return out
	}
	require.Equal(t, []string{"old", "a", "b", "d"}, ids(txSub))
	require.Equal(t, ids(restSub), ids(txSub))
	require.Equal(t, []int64{txSub.ID}, out.Subscriptions)
	require.Equal(t, []int64{store.TopicWakeKey(tx.ID), txSub.ID}, out.WakeKeys)
}

// place is where a result landed, whether it was a duplicate or not.
func place(r store.PublishResult) [3]any { return [3]any{r.ID, r.Partition, r.Offset} }

func duplicates(rs []store.PublishResult) []bool {
	return each(rs, func(r store.PublishResult) bool { return r.Duplicate })
}

// batchTags records, per batch sent, the tag (or, untagged, the text) of
// each statement in it; queries sent alone are recorded as batches of one.
type batchTags struct {
	mu      sync.Mutex
	batches [][]string
}

var tagOf = regexp.MustCompile(`/\*\s*ferry:([a-z0-9_]+)\s*\*/`)

func (b *batchTags) record(sqls ...string) {
	var tags []string
	for _, s := range sqls {
		if m := tagOf.FindStringSubmatch(s); m != nil {
			s = m[1]
		}
		tags = append(tags, s)
	}
	b.mu.Lock()
	b.batches = append(b.batches, tags)
	b.mu.Unlock()
}

func (b *batchTags) take() [][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.batches
	b.batches = nil
	return out
}

func (b *batchTags) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	b.record(data.SQL)
	return ctx
}

func (b *batchTags) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (b *batchTags) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range data.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	b.record(sqls...)
	return ctx
}

func (b *batchTags) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (b *batchTags) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// A publish is two round trips of fixed statements, whichever way it is
// made: EventPublish and the Publisher with BEGIN and COMMIT riding along,
// and the bound on the claim's wait for an id claimed by a transaction
// still open around the claim; EventPublishTx in the caller's transaction
// without them. The benchmark counts these tags; a refactoring must not
// add a statement or a round trip.
func TestEventPublishStatements(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "stmts", 2)
	e.subscribe(tp, "ordered", `{"types": ["order.#"]}`, store.SubscriptionPatch{Ordered: ptr(true)})
	tags := &batchTags{}
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = tags
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	first := []string{"event_dedup_claim", "event_dedup_read", "topic_subscriptions_read"}
	second := []string{"topic_partitions_lock", "topic_subscriptions_check", "event_append"}
	grouped := []string{"topic_partitions_lock", "topic_subscriptions_check", "event_group_locks", "event_append"}
	own := func(a, b []string) [][]string {
		bounded := []string{"BEGIN", "event_dedup_claim_wait", a[0], "event_dedup_claim_wait_end"}
		return [][]string{append(bounded, a[1:]...), append(slices.Clone(b), "COMMIT")}
	}
	keyed := func(id string) store.PublishEvent {
		return store.PublishEvent{ID: id, Type: "order.created", Key: ptr("k")}
	}

	_, _, err = store.EventPublish(e.ctx, pool, tp, []store.PublishEvent{keyed("a"), event("other")})
	require.NoError(t, err)
	require.Equal(t, own(first, grouped), tags.take(), "EventPublish")

	p := store.NewPublisher(pool, store.PublisherConfig{})
	t.Cleanup(p.Close)
	_, err = p.Publish(e.ctx, tp, []store.PublishEvent{event("other")})
	require.NoError(t, err)
	require.Equal(t, own(first, second), tags.take(), "Publisher")

	err = pgx.BeginFunc(e.ctx, pool, func(tx pgx.Tx) error {
		_, err := store.EventPublishTx(e.ctx, tx, store.PublishParams{Topic: tp, Events: []store.PublishEvent{keyed("b")}})
		return err
	})
	require.NoError(t, err)
	require.Equal(t, [][]string{{"begin"}, first, grouped, {"commit"}}, tags.take(), "EventPublishTx")

	// Every event a duplicate: still the same statements.
	_, _, err = store.EventPublish(e.ctx, pool, tp, []store.PublishEvent{keyed("a")})
	require.NoError(t, err)
	require.Equal(t, own(first, second), tags.take(), "EventPublish of a duplicate")
}
