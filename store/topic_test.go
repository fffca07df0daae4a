package store_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// topic creates a topic with the given configuration changes.
func (e *env) topic(name string, patch store.TopicPatch) store.Topic {
	e.t.Helper()
	tp, created, err := store.TopicUpsert(e.ctx, e.db, name, patch)
	require.NoError(e.t, err)
	require.True(e.t, created, "topic %s already existed", name)
	return tp
}

// newTopicEnv is a newEnv and a topic of the given partitions in it.
func newTopicEnv(t *testing.T, name string, partitions int) (*env, store.Topic) {
	t.Helper()
	e := newEnv(t)
	return e, e.topic(name, store.TopicPatch{Partitions: ptr(partitions)})
}

// publish publishes events with EventPublish (in a newTxEnv,
// EventPublishTx) and requires success.
func (e *env) publish(tp store.Topic, events ...store.PublishEvent) []store.PublishResult {
	e.t.Helper()
	if e.tx != nil {
		out, err := store.EventPublishTx(e.ctx, e.tx, store.PublishParams{Topic: tp, Events: events})
		require.NoError(e.t, err)
		require.Len(e.t, out.Results, len(events))
		return out.Results
	}
	res, _, err := store.EventPublish(e.ctx, e.pool, tp, events)
	require.NoError(e.t, err)
	require.Len(e.t, res, len(events))
	return res
}

// offsets returns the topic's partition offsets.
func (e *env) offsets(tp store.Topic) []store.PartitionOffsets {
	e.t.Helper()
	offs, err := store.TopicOffsets(e.ctx, e.db, []int64{tp.ID})
	require.NoError(e.t, err)
	return offs[tp.ID]
}

// read runs one EventRead without a notifier.
func (e *env) read(p store.ReadParams) ([]store.Event, int64) {
	e.t.Helper()
	if p.Limit == 0 {
		p.Limit = 1000
	}
	evs, next, err := store.EventRead(e.ctx, e.db, nil, p)
	require.NoError(e.t, err)
	return evs, next
}

// eventOffsets lists the offsets of events.
func eventOffsets(evs []store.Event) []int64 {
	return each(evs, func(ev store.Event) int64 { return ev.Offset })
}

// span is the offsets from..to, inclusive.
func span(from, to int64) []int64 {
	out := []int64{}
	for o := from; o <= to; o++ {
		out = append(out, o)
	}
	return out
}

func event(typ string) store.PublishEvent { return store.PublishEvent{Type: typ} }

func eventWithID(id string) store.PublishEvent { return store.PublishEvent{ID: id, Type: "t"} }

func eventWithKey(id, key string) store.PublishEvent {
	return store.PublishEvent{ID: id, Type: "t", Key: ptr(key)}
}

// keysFor returns, per partition of n, a key that PartitionForKey maps there.
func keysFor(n int) []string {
	keys := make([]string, n)
	found := 0
	for i := 0; found < n; i++ {
		k := fmt.Sprintf("key-%d", i)
		if p := store.PartitionForKey(k, n); keys[p] == "" {
			keys[p] = k
			found++
		}
	}
	return keys
}

// topicRows counts a topic's rows in each table that holds topic content.
func (e *env) topicRows(topicID int64) map[string]int64 {
	e.t.Helper()
	out := map[string]int64{}
	for _, table := range []string{"ferry.events", "ferry.event_dedup", "ferry.topic_partitions"} {
		out[table] = e.count(`SELECT count(*) FROM `+table+` WHERE topic_id = $1`, topicID)
	}
	return out
}

// publishAtOnce runs n publishes of the same batch at the same moment and
// returns every answer.
func publishAtOnce(t *testing.T, e *env, tp store.Topic, n int, batch ...store.PublishEvent) [][]store.PublishResult {
	t.Helper()
	results, errs := make([][]store.PublishResult, n), make([]error, n)
	atOnce(n, func(i int) {
		results[i], _, errs[i] = store.EventPublish(context.Background(), e.pool, tp, batch)
	})
	for i, err := range errs {
		require.NoError(t, err, "publish %d", i)
		require.Len(t, results[i], len(batch))
	}
	return results
}

// uniqueTopicIDs makes the test database's topic ids unlike other tests'
// (topic ids start at 1 in every test database), so no state kept per
// topic id in the process could be shared by parallel tests. Keyless
// spreading once was; now each Publisher owns its Spreader (see
// TestPublisherSpread).
func (e *env) uniqueTopicIDs() {
	e.t.Helper()
	if e.tx != nil {
		// The shared database of a newTxEnv has one sequence for every
		// test of the binary, and altering it would lock the table until
		// the test ends.
		return
	}
	_, err := e.pool.Exec(e.ctx, fmt.Sprintf(`ALTER TABLE ferry.topics ALTER COLUMN id RESTART WITH %d`, 1_000_000+rand.IntN(1_000_000_000)))
	require.NoError(e.t, err)
}

// Partitions only grow; a PUT without change keeps updated_at.
func TestTopicPartitionsOnlyGrow(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	name := e.name("g")
	e.uniqueTopicIDs()
	tp := e.topic(name, store.TopicPatch{})
	require.Equal(t, store.DefaultTopicConfig(), tp.TopicConfig)
	require.Equal(t, store.TopicConfig{Partitions: 4, RetentionSeconds: 604800, DedupWindowSeconds: 300}, tp.TopicConfig)
	offs := e.offsets(tp)
	require.Len(t, offs, 4)
	for p, o := range offs {
		require.Equal(t, store.PartitionOffsets{Partition: p, HeadOffset: -1, OldestOffset: 0}, o)
	}
	keys := keysFor(4)
	for p, k := range keys {
		for range p + 1 {
			e.publish(tp, store.PublishEvent{Type: "t", Key: ptr(k)})
		}
	}

	// Shrinking is a conflict and changes nothing.
	for _, n := range []int{3, 1} {
		_, _, err := store.TopicUpsert(e.ctx, e.db, name, store.TopicPatch{Partitions: ptr(n), RetentionSeconds: ptr(60)})
		require.Error(t, err)
		require.True(t, errors.Is(err, store.ErrConflict), "shrink error %v wraps ErrConflict", err)
		var shrink *store.ShrinkError
		require.True(t, errors.As(err, &shrink), "shrink error %T is a *ShrinkError", err)
		require.Equal(t, store.ShrinkError{From: 4, To: n}, *shrink)
	}
	got, err := store.TopicGet(e.ctx, e.db, name)
	require.NoError(t, err)
	require.Equal(t, tp, got, "a refused shrink changed nothing, not even retention")
	require.EqualValues(t, 4, e.count(`SELECT count(*) FROM ferry.topic_partitions WHERE topic_id = $1`, tp.ID))

	// The same count, or an empty patch, is no change: updated_at stays.
	for _, patch := range []store.TopicPatch{{}, {Partitions: ptr(4)}, {Partitions: ptr(4), RetentionSeconds: ptr(604800), DedupWindowSeconds: ptr(300)}} {
		same, created, err := store.TopicUpsert(e.ctx, e.db, name, patch)
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, tp, same, "patch %+v", patch)
	}

	// Growing adds empty partitions and keeps the old ones' logs.
	grown, created, err := store.TopicUpsert(e.ctx, e.db, name, store.TopicPatch{Partitions: ptr(6)})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, 6, grown.Partitions)
	require.Equal(t, tp.CreatedAt, grown.CreatedAt)
	require.False(t, grown.UpdatedAt.Before(tp.UpdatedAt))
	require.EqualValues(t, 6, e.count(`SELECT count(*) FROM ferry.topic_partitions WHERE topic_id = $1`, tp.ID))
	offs = e.offsets(grown)
	require.Len(t, offs, 6)
	for p, o := range offs {
		want := store.PartitionOffsets{Partition: p, HeadOffset: -1, OldestOffset: 0}
		if p < 4 {
			want.HeadOffset = int64(p)
		}
		require.Equal(t, want, o)
	}
	// The new partitions take events from offset 0, keyed and keyless.
	keys6 := keysFor(6)
	r := e.publish(grown, store.PublishEvent{Type: "t", Key: ptr(keys6[5])})[0]
	require.Equal(t, 5, r.Partition)
	require.EqualValues(t, 0, r.Offset)
	batch := make([]store.PublishEvent, 12)
	for i := range batch {
		batch[i] = event("t")
	}
	used := map[int]bool{}
	for _, r := range e.publish(grown, batch...) {
		used[r.Partition] = true
	}
	require.True(t, used[4], "keyless events reach new partition 4 too")
	// A publisher still holding the old Topic value (4 partitions) keeps
	// working on the partitions it knows.
	old := e.publish(tp, store.PublishEvent{Type: "t", Key: ptr(keys[1])})[0]
	require.Equal(t, store.PartitionForKey(keys[1], 4), old.Partition)

	// Growing by 1 and to the maximum.
	_, _, err = store.TopicUpsert(e.ctx, e.db, name, store.TopicPatch{Partitions: ptr(256)})
	require.NoError(t, err)
	require.Len(t, e.offsets(grown), 256)
}

// holdPartition locks partition p of tp's row (FOR UPDATE) in a
// transaction of its own, as a publish to p does, until the test rolls the
// returned transaction back (at the latest, at cleanup).
func (e *env) holdPartition(tp store.Topic, p int) pgx.Tx {
	e.t.Helper()
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var one int
	require.NoError(e.t, tx.QueryRow(e.ctx,
		`SELECT 1 FROM ferry.topic_partitions WHERE topic_id = $1 AND partition = $2 FOR UPDATE`, tp.ID, p).Scan(&one))
	return tx
}

// publishedEvents is the outcome of an EventPublish run in a goroutine.
type publishedEvents struct {
	res []store.PublishResult
	err error
}

func publishAsync(ctx context.Context, pool *pgxpool.Pool, tp store.Topic, events ...store.PublishEvent) <-chan publishedEvents {
	return inBackground(func(time.Time) publishedEvents {
		res, _, err := store.EventPublish(ctx, pool, tp, events)
		return publishedEvents{res, err}
	})
}

// receivedEvents is the outcome of an EventRead run in a goroutine.
type receivedEvents struct {
	events  []store.Event
	next    int64
	err     error
	elapsed time.Duration
}

func readAsync(ctx context.Context, db store.DBTX, n *store.Notifier, p store.ReadParams) <-chan receivedEvents {
	return inBackground(func(start time.Time) receivedEvents {
		evs, next, err := store.EventRead(ctx, db, n, p)
		return receivedEvents{evs, next, err, time.Since(start)}
	})
}

// runNotifierWindow is runNotifier with a given window.
func (e *env) runNotifierWindow(pool *pgxpool.Pool, window time.Duration) *store.Notifier {
	n := store.NewNotifier(pool, window, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return n
}

// Deleting a topic: its content goes in bounded batches; publishes with a
// stale Topic fail with not found and write nothing; a publish racing the
// delete lands entirely before it or fails.
func TestTopicDelete(t *testing.T) {
	t.Parallel()

	t.Run("ContentAndStalePublish", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		tp := e.topic("del", store.TopicPatch{})
		survivor := e.topic("survivor", store.TopicPatch{Partitions: ptr(1)})
		var batch []store.PublishEvent
		for i := range 50 {
			batch = append(batch, eventWithID(fmt.Sprintf("e%d", i)))
		}
		e.publish(tp, batch...)
		e.publish(survivor, eventWithID("e1"))
		require.Equal(t, map[string]int64{"ferry.events": 50, "ferry.event_dedup": 50, "ferry.topic_partitions": 4}, e.topicRows(tp.ID))

		require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			id, _, err := store.TopicDelete(e.ctx, tx, "del")
			require.Equal(t, tp.ID, id)
			return err
		}))
		_, err := store.TopicGet(e.ctx, e.pool, "del")
		require.True(t, errors.Is(err, store.ErrNotFound), "got %v", err)
		require.Zero(t, e.topicRows(tp.ID)["ferry.topic_partitions"])

		// A publish with the stale Topic value: not found, nothing written.
		before := e.topicRows(tp.ID)
		_, _, err = store.EventPublish(e.ctx, e.pool, tp, []store.PublishEvent{eventWithID("late"), event("t")})
		require.True(t, errors.Is(err, store.ErrNotFound), "got %v", err)
		require.Equal(t, before, e.topicRows(tp.ID), "a publish answered not found must write nothing (invariants 9, 10)")
		require.Zero(t, e.count(`SELECT count(*) FROM ferry.event_dedup WHERE event_id = 'late'`))
		// Also when every event repeats an id the deleted topic still
		// remembers (its content is not cleaned up yet): not found, not
		// duplicate answers pointing into a deleted topic.
		res, _, err := store.EventPublish(e.ctx, e.pool, tp, []store.PublishEvent{eventWithID("e1"), eventWithID("e2")})
		require.True(t, errors.Is(err, store.ErrNotFound), "a publish of only duplicates to a deleted topic: got %+v, %v", res, err)
		require.Equal(t, before, e.topicRows(tp.ID))

		var total int64
		for {
			n, err := store.TopicDeleteContent(e.ctx, e.pool, tp.ID, 7)
			require.NoError(t, err)
			require.LessOrEqual(t, n, int64(7+7), "bounded batches")
			if n == 0 {
				break
			}
			total += n
		}
		require.EqualValues(t, 100, total, "50 events and 50 dedup ids")
		require.Equal(t, map[string]int64{"ferry.events": 0, "ferry.event_dedup": 0, "ferry.topic_partitions": 0}, e.topicRows(tp.ID))
		require.Equal(t, map[string]int64{"ferry.events": 1, "ferry.event_dedup": 1, "ferry.topic_partitions": 1}, e.topicRows(survivor.ID))

		_, _, err = store.EventPublish(e.ctx, e.pool, tp, []store.PublishEvent{event("t")})
		require.True(t, errors.Is(err, store.ErrNotFound), "got %v", err)
		require.Equal(t, map[string]int64{"ferry.events": 0, "ferry.event_dedup": 0, "ferry.topic_partitions": 0}, e.topicRows(tp.ID))

		// Deleting it again: not found. The name can be used anew, from 0.
		err = pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error { _, _, err := store.TopicDelete(e.ctx, tx, "del"); return err })
		require.True(t, errors.Is(err, store.ErrNotFound), "got %v", err)
		again := e.topic("del", store.TopicPatch{Partitions: ptr(1)})
		require.NotEqual(t, tp.ID, again.ID)
		r := e.publish(again, eventWithID("e1"))[0]
		require.Equal(t, store.PublishResult{ID: "e1", Partition: 0, Offset: 0}, r, "the old topic's ids are forgotten")
	})

	t.Run("RacingPublishes", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		tp := e.topic("race", store.TopicPatch{})
		type outcome struct {
			res   []store.PublishResult
			err   error
			after bool // started after the delete committed
		}
		var (
			deleted  atomic.Bool
			wg       sync.WaitGroup
			outcomes = make([][]outcome, 6)
		)
		for w := range 6 {
			wg.Go(func() {
				for seq := 0; ; seq++ {
					batch := make([]store.PublishEvent, 5)
					for i := range batch {
						batch[i] = eventWithID(fmt.Sprintf("w%d-%d-%d", w, seq, i))
						if i%2 == 0 {
							batch[i].Key = ptr(fmt.Sprintf("k%d", seq+i))
						}
					}
					after := deleted.Load()
					res, _, err := store.EventPublish(e.ctx, e.pool, tp, batch)
					outcomes[w] = append(outcomes[w], outcome{res, err, after})
					if err != nil || after {
						return
					}
				}
			})
		}
		require.Eventually(t, func() bool {
			var n int
			err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID).Scan(&n)
			return err == nil && n >= 100
		}, 20*time.Second, 5*time.Millisecond)
		require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			_, _, err := store.TopicDelete(e.ctx, tx, "race")
			return err
		}), "the delete must not fail under concurrent publishes")
		deleted.Store(true)
		wg.Wait()

		rows, err := e.pool.Query(e.ctx, `SELECT id, partition, "offset" FROM ferry.events WHERE topic_id = $1`, tp.ID)
		require.NoError(t, err)
		stored := map[string][2]int64{}
		for rows.Next() {
			var (
				id  string
				p   int64
				off int64
			)
			require.NoError(t, rows.Scan(&id, &p, &off))
			stored[id] = [2]int64{p, off}
		}
		require.NoError(t, rows.Err())
		succeeded := 0
		for w, outs := range outcomes {
			require.NotEmpty(t, outs)
			last := outs[len(outs)-1]
			require.Error(t, last.err, "publisher %d: publishes after the delete fail", w)
			for i, o := range outs {
				if o.err != nil {
					require.True(t, errors.Is(o.err, store.ErrNotFound), "publisher %d: %v", w, o.err)
					require.Equal(t, len(outs)-1, i, "publisher %d: only its last publish failed", w)
					continue
				}
				require.False(t, o.after, "publisher %d: a publish begun after the delete committed succeeded", w)
				for _, r := range o.res {
					require.False(t, r.Duplicate)
					require.Equal(t, [2]int64{int64(r.Partition), r.Offset}, stored[r.ID], "acknowledged event %s is stored where answered", r.ID)
					succeeded++
				}
			}
		}
		require.Len(t, stored, succeeded, "nothing stored but acknowledged batches, whole")
		t.Logf("%d events acknowledged before the delete", succeeded)

		for {
			n, err := store.TopicDeleteContent(e.ctx, e.pool, tp.ID, 50)
			require.NoError(t, err)
			if n == 0 {
				break
			}
		}
		require.Equal(t, map[string]int64{"ferry.events": 0, "ferry.event_dedup": 0, "ferry.topic_partitions": 0}, e.topicRows(tp.ID))
	})
}

// A delete that meets a publish holding some of the topic's partitions
// (and waiting for another) must not fail: the publish either lands before
// the delete or fails with not found, and the delete succeeds. The
// interleaving is forced: a partition row updated by a publish moves to
// the end of the table's page, so a sequential scan (the DELETE of the
// partition rows) takes the partitions in an order other than the
// publishes' (partition order). Publish X takes partition 0 and waits for
// partition 1, held by the test; the delete takes partition 2, then waits
// for partition 0 (X's); the test lets go of partition 1; X then waits for
// partition 2 (the delete's).
func TestTopicDeleteMeetsWaitingPublish(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "crossed", 3)
	keys := keysFor(3)
	e.publish(tp, eventWithKey("p0", keys[0]))
	e.publish(tp, eventWithKey("p1", keys[1]))
	// What autovacuum does soon on a busy topic_partitions: with
	// statistics, the planner scans this small table sequentially.
	_, err := e.pool.Exec(e.ctx, `ANALYZE ferry.topic_partitions`)
	require.NoError(t, err)
	var order []int
	rows, err := e.pool.Query(e.ctx, `SELECT partition FROM ferry.topic_partitions WHERE topic_id = $1 ORDER BY ctid`, tp.ID)
	require.NoError(t, err)
	for rows.Next() {
		var p int
		require.NoError(t, rows.Scan(&p))
		order = append(order, p)
	}
	require.NoError(t, rows.Err())
	t.Logf("partition rows in physical order: %v", order)

	holder := e.holdPartition(tp, 1)
	xPool := e.newNamedPool(2, "publisher-x")
	xDone := publishAsync(e.ctx, xPool, tp, eventWithKey("x0", keys[0]), eventWithKey("x1", keys[1]), eventWithKey("x2", keys[2]))
	e.activityWaitingEventually("publisher-x")

	delPool := e.newNamedPool(2, "deleter")
	delDone := make(chan error, 1)
	go func() {
		delDone <- pgx.BeginFunc(e.ctx, delPool, func(tx pgx.Tx) error {
			_, _, err := store.TopicDelete(e.ctx, tx, "crossed")
			return err
		})
	}()
	e.activityWaitingEventually("deleter")
	require.NoError(t, holder.Rollback(e.ctx))

	x := <-xDone
	delErr := <-delDone
	require.NoError(t, delErr, "the delete must not fail because a publish was in its way")
	if x.err != nil {
		require.True(t, errors.Is(x.err, store.ErrNotFound), "the publish fails only with not found: %v", x.err)
		require.Zero(t, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1 AND id LIKE 'x%'`, tp.ID))
	} else {
		require.EqualValues(t, 3, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1 AND id LIKE 'x%'`, tp.ID))
	}
	_, err = store.TopicGet(e.ctx, e.pool, "crossed")
	require.True(t, errors.Is(err, store.ErrNotFound), "got %v", err)
}
