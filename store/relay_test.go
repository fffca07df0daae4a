package store_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// sqlPublished is one row of ferry.publish / ferry.publish_batch.
type sqlPublished struct {
	ID        string
	Partition int
	Duplicate bool
}

// sqlPublish calls ferry.publish_batch(topic, events) on db (a caller's
// transaction, or the pool: a transaction of its own).
func sqlPublish(ctx context.Context, db store.DBTX, topic string, events ...map[string]any) ([]sqlPublished, error) {
	raw, err := json.Marshal(events)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT id, partition, duplicate FROM ferry.publish_batch($1, $2)`, topic, raw)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (sqlPublished, error) {
		var p sqlPublished
		err := row.Scan(&p.ID, &p.Partition, &p.Duplicate)
		return p, err
	})
}

func (e *env) sqlPublish(db store.DBTX, topic string, events ...map[string]any) []sqlPublished {
	e.t.Helper()
	out, err := sqlPublish(e.ctx, db, topic, events...)
	require.NoError(e.t, err)
	require.Len(e.t, out, len(events))
	return out
}

// newRelay makes a Relay on the env's pool that nothing wakes: the test
// drains it.
func (e *env) newRelay() *store.Relay {
	return store.NewRelay(e.pool, nil, store.RelayConfig{})
}

// runRelay runs a Relay woken by a Notifier of its own, until cleanup.
func (e *env) runRelay(published func(topicIDs, subs []int64)) (*store.Relay, *store.Notifier) {
	n := store.NewNotifier(e.pool, 5*time.Millisecond, slog.New(slog.DiscardHandler))
	r := store.NewRelay(e.pool, n, store.RelayConfig{Published: func(topicIDs, subs []int64) {
		keys := []int64{}
		for _, id := range topicIDs {
			keys = append(keys, store.TopicWakeKey(id))
		}
		n.Published(append(keys, subs...))
		if published != nil {
			published(topicIDs, subs)
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); n.Run(ctx) }()
	go func() { defer wg.Done(); r.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); wg.Wait() })
	return r, n
}

func (e *env) drain(r *store.Relay) int {
	e.t.Helper()
	n, err := r.Drain(e.ctx)
	require.NoError(e.t, err)
	return n
}

func (e *env) pendingRows(tp store.Topic) int64 {
	return e.count(`SELECT count(*) FROM ferry.event_pending WHERE topic_id = $1`, tp.ID)
}

func (e *env) dedupRows(tp store.Topic) int64 {
	return e.count(`SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1`, tp.ID)
}

// dedupOffsets is the offset of each event id the topic remembers.
func (e *env) dedupOffsets(tp store.Topic) map[string]int64 {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT event_id, "offset" FROM ferry.event_dedup WHERE topic_id = $1`, tp.ID)
	require.NoError(e.t, err)
	out := map[string]int64{}
	var (
		id  string
		off int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &off}, func() error { out[id] = off; return nil })
	require.NoError(e.t, err)
	return out
}

func ev(id, typ string, kv ...any) map[string]any {
	m := map[string]any{"type": typ}
	if id != "" {
		m["id"] = id
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// The keyed partition of the SQL API is store.PartitionForKey: FNV-1a
// 32-bit of the key's UTF-8 bytes mod partitions, for ASCII, multi-byte
// and random keys over several partition counts.
func TestSQLPartitionForKeyIsGo(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	keys := []string{"a", "ORD-9912", "", "é", "日本語のキー", "emoji 🚀", "\u00ff\u0100", "k\x01", string(make([]byte, 256))[:0] + "x"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 400 {
		b := make([]rune, 1+rng.IntN(40))
		for i := range b {
			switch rng.IntN(3) {
			case 0:
				b[i] = rune(0x21 + rng.IntN(0x5e))
			case 1:
				b[i] = rune(0xa0 + rng.IntN(0x700))
			default:
				b[i] = rune(0x3040 + rng.IntN(0x2000))
			}
		}
		keys = append(keys, string(b))
	}
	parts := []int{1, 2, 3, 4, 7, 16, 100, 256}
	var (
		ks []string
		ps []int32
	)
	for _, k := range keys {
		for _, p := range parts {
			ks, ps = append(ks, k), append(ps, int32(p))
		}
	}
	rows, err := e.tx.Query(e.ctx, `SELECT ferry.partition_for_key(k, p) FROM unnest($1::text[], $2::int[]) AS t(k, p)`, ks, ps)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Len(t, got, len(ks))
	for i := range ks {
		require.Equal(t, int32(store.PartitionForKey(ks[i], int(ps[i]))), got[i], "key %q of %d partitions", ks[i], ps[i])
	}
}

// A rolled-back transaction leaves nothing of ferry.publish (no event, no
// dedup claim, no pending row), nor does a rolled-back savepoint of its
// own events; a committed one is appended by the relay: the events in
// call order with dense offsets, their claims pointing at them.
func TestSQLPublishCommitRollback(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "orders", 1)
	r := e.newRelay()

	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	got := e.sqlPublish(tx, "orders", ev("rb-1", "t"), ev("rb-2", "t"))
	require.Equal(t, []sqlPublished{{"rb-1", 0, false}, {"rb-2", 0, false}}, got)
	require.NoError(t, tx.Rollback(e.ctx))
	require.Zero(t, e.pendingRows(tp))
	require.Zero(t, e.dedupRows(tp))
	require.Zero(t, e.drain(r))
	require.Empty(t, e.allEvents(tp))

	tx, err = e.pool.Begin(e.ctx)
	require.NoError(t, err)
	e.sqlPublish(tx, "orders", ev("c-1", "t"))
	_, err = tx.Exec(e.ctx, `SAVEPOINT s`)
	require.NoError(t, err)
	e.sqlPublish(tx, "orders", ev("gone", "t"))
	_, err = tx.Exec(e.ctx, `ROLLBACK TO SAVEPOINT s`)
	require.NoError(t, err)
	e.sqlPublish(tx, "orders", ev("c-2", "t"), ev("c-3", "t"))
	require.Zero(t, e.drain(r), "nothing committed yet")
	require.NoError(t, tx.Commit(e.ctx))
	require.Equal(t, int64(3), e.pendingRows(tp))

	require.Equal(t, 3, e.drain(r))
	require.Zero(t, e.pendingRows(tp))
	evs, _ := e.read(store.ReadParams{Topic: tp, Partition: 0, Limit: 10})
	require.Equal(t, []string{"c-1", "c-2", "c-3"}, each(evs, func(ev store.Event) string { return ev.ID }))
	require.Equal(t, span(0, 2), eventOffsets(evs))
	require.Equal(t, map[string]int64{"c-1": 0, "c-2": 1, "c-3": 2}, e.dedupOffsets(tp))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1 AND expires_at = 'infinity'`, tp.ID),
		"the window of an appended event runs")
	require.Zero(t, e.drain(r), "appended once")
}
