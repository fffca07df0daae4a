package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// groupSession is the session timeout of the tests' members: long enough
// that nobody is evicted by time; tests expire members with expireMember.
const groupSession = 30 * time.Second

// gpollStart polls once (no waiting) as consumer c of group g, which a
// first poll creates positioned at start.
func (e *env) gpollStart(tp store.Topic, g, c string, start store.StartPosition, max int) store.ConsumerGroupPollResult {
	e.t.Helper()
	res, err := store.ConsumerGroupPoll(e.ctx, e.pool, nil, store.ConsumerGroupPollParams{
		Topic: tp, Group: g, Consumer: c, SessionTimeout: groupSession, Start: start, Max: max,
	})
	require.NoError(e.t, err)
	return res
}

// gpoll polls once as consumer c of group g, created at the earliest event.
func (e *env) gpoll(tp store.Topic, g, c string, max int) store.ConsumerGroupPollResult {
	e.t.Helper()
	return e.gpollStart(tp, g, c, store.StartPosition{Earliest: true}, max)
}

// gcommit commits offsets as consumer c naming generation gen.
func (e *env) gcommit(tp store.Topic, g, c string, gen int64, offsets map[int]int64) error {
	return store.ConsumerGroupCommit(e.ctx, e.pool, store.ConsumerGroupCommitParams{
		Topic: tp, Group: g, Consumer: c, Generation: gen, Offsets: offsets,
	})
}

// gdescribe describes group g.
func (e *env) gdescribe(tp store.Topic, g string) store.ConsumerGroup {
	e.t.Helper()
	grp, err := store.ConsumerGroupDescribe(e.ctx, e.pool, tp, g)
	require.NoError(e.t, err)
	return grp
}

// committedOffsets is the group's committed offset of each partition, in
// partition order.
func (e *env) committedOffsets(tp store.Topic, g string) []int64 {
	e.t.Helper()
	var out []int64
	for _, p := range e.gdescribe(tp, g).Partitions {
		out = append(out, p.CommittedOffset)
	}
	return out
}

// groupID is the id of tp's group g.
func (e *env) groupID(tp store.Topic, g string) int64 {
	e.t.Helper()
	return e.count(`SELECT id FROM ferry.consumer_groups WHERE topic_id = $1 AND name = $2`, tp.ID, g)
}

// expireMember makes consumer c's session look timed out, as if it had
// not polled for an hour; the next poll or describe of the group evicts it.
func (e *env) expireMember(tp store.Topic, g, c string) {
	e.t.Helper()
	require.NoError(e.t, expireMember(e.ctx, e, tp, g, c))
}

func expireMember(ctx context.Context, e *env, tp store.Topic, g, c string) error {
	tag, err := e.pool.Exec(ctx, `
		UPDATE ferry.group_members SET last_seen = now() - interval '1 hour'
		WHERE consumer = $3 AND group_id = (SELECT id FROM ferry.consumer_groups WHERE topic_id = $1 AND name = $2)`,
		tp.ID, g, c)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("expire %s: %d members updated", c, tag.RowsAffected())
	}
	return err
}

// publishTo publishes n events to partition p (keyed so that they land
// there) and returns their results.
func (e *env) publishTo(tp store.Topic, p, n int) []store.PublishResult {
	e.t.Helper()
	key := keysFor(tp.Partitions)[p]
	evs := make([]store.PublishEvent, n)
	for i := range evs {
		evs[i] = store.PublishEvent{Type: "t", Key: ptr(key)}
	}
	res := e.publish(tp, evs...)
	for _, r := range res {
		require.Equal(e.t, p, r.Partition)
	}
	return res
}

// filledTopic creates a topic of the given partitions and publishes
// perPartition events to each.
func (e *env) filledTopic(name string, partitions, perPartition int) store.Topic {
	e.t.Helper()
	tp := e.topic(name, store.TopicPatch{Partitions: ptr(partitions)})
	for p := range partitions {
		e.publishTo(tp, p, perPartition)
	}
	return tp
}

// byPartition groups events' offsets by partition, in the order returned.
func byPartition(evs []store.Event) map[int][]int64 {
	out := map[int][]int64{}
	for _, ev := range evs {
		out[ev.Partition] = append(out[ev.Partition], ev.Offset)
	}
	return out
}

func publishedIDs(res []store.PublishResult) []string {
	return each(res, func(r store.PublishResult) string { return r.ID })
}

func eventIDs(evs []store.Event) []string {
	return each(evs, func(ev store.Event) string { return ev.ID })
}

func requireValidation(t *testing.T, err error, field string) {
	t.Helper()
	var verr *store.ValidationError
	require.True(t, errors.As(err, &verr), "want a validation error, got %v", err)
	require.Equal(t, field, verr.Field)
}

// holdTracer stops the first query whose SQL contains match (with exact,
// is match) before it is sent, until release is closed; arrived is closed
// when it stops there.
type holdTracer struct {
	match   string
	exact   bool
	once    sync.Once
	arrived chan struct{}
	release chan struct{}
}

func (h *holdTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if data.SQL == h.match || !h.exact && strings.Contains(data.SQL, h.match) {
		h.once.Do(func() {
			close(h.arrived)
			<-h.release
		})
	}
	return ctx
}

func (h *holdTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart holds a batch that holds a matching query.
func (h *holdTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	for _, q := range data.Batch.QueuedQueries {
		h.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: q.SQL})
	}
	return ctx
}

func (h *holdTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (h *holdTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// heldPool is a pool on the test's database whose first query containing
// match waits until the returned release is called.
func (e *env) heldPool(match string) (*pgxpool.Pool, *holdTracer, func()) {
	e.t.Helper()
	return e.heldPoolAt(&holdTracer{match: match})
}

// heldPoolAt is heldPool with the tracer h (its channels made here).
func (e *env) heldPoolAt(h *holdTracer) (*pgxpool.Pool, *holdTracer, func()) {
	e.t.Helper()
	h.arrived, h.release = make(chan struct{}), make(chan struct{})
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	require.NoError(e.t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.Tracer = h
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(e.t, err)
	var once sync.Once
	release := func() { once.Do(func() { close(h.release) }) }
	e.t.Cleanup(pool.Close)
	e.t.Cleanup(release) // runs first
	return pool, h, release
}

// Deleting a topic removes its groups' rows; ConsumerGroupDelete removes one
// group's; other groups keep theirs.
func TestGroupDeleteRows(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "del", 3)
	other := e.topic("other", store.TopicPatch{Partitions: ptr(2)})
	e.publishTo(tp, 0, 3)
	rows := func(gid int64) []int64 {
		return []int64{
			e.count(`SELECT count(*) FROM ferry.consumer_groups WHERE id = $1`, gid),
			e.count(`SELECT count(*) FROM ferry.group_members WHERE group_id = $1`, gid),
			e.count(`SELECT count(*) FROM ferry.group_partitions WHERE group_id = $1`, gid),
		}
	}
	for _, g := range []string{"g", "h"} {
		for _, c := range []string{"a", "b"} {
			r := e.gpoll(tp, g, c, 100)
			if len(r.Events) > 0 {
				require.NoError(t, e.gcommit(tp, g, c, r.Generation, map[int]int64{0: 2}))
			}
		}
	}
	e.gpoll(other, "g", "a", 100)
	gid, hid, oid := e.groupID(tp, "g"), e.groupID(tp, "h"), e.groupID(other, "g")
	require.Equal(t, []int64{1, 2, 3}, rows(gid))
	require.Equal(t, []int64{1, 2, 3}, rows(hid))
	require.Equal(t, []int64{1, 1, 2}, rows(oid))

	t.Run("ConsumerGroupDelete", func(t *testing.T) {
		require.NoError(t, store.ConsumerGroupDelete(e.ctx, e.pool, tp, "h"))
		require.Equal(t, []int64{0, 0, 0}, rows(hid))
		require.ErrorIs(t, store.ConsumerGroupDelete(e.ctx, e.pool, tp, "h"), store.ErrNotFound)
		_, err := store.ConsumerGroupDescribe(e.ctx, e.pool, tp, "h")
		require.ErrorIs(t, err, store.ErrNotFound)
		names, more, err := store.ConsumerGroupList(e.ctx, e.pool, store.ConsumerGroupListParams{TopicID: tp.ID})
		require.NoError(t, err)
		require.Equal(t, []string{"g"}, names)
		require.False(t, more)
	})

	t.Run("TopicDelete", func(t *testing.T) {
		require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			_, _, err := store.TopicDelete(e.ctx, tx, "del")
			return err
		}))
		require.Equal(t, []int64{0, 0, 0}, rows(gid))
		require.Zero(t, e.count(`SELECT count(*) FROM ferry.consumer_groups WHERE topic_id = $1`, tp.ID))
		require.Equal(t, []int64{1, 1, 2}, rows(oid), "another topic's group is untouched")

		// The deleted topic's members find nothing.
		_, err := store.ConsumerGroupPoll(e.ctx, e.pool, nil, store.ConsumerGroupPollParams{Topic: tp, Group: "g", Consumer: "a", SessionTimeout: groupSession, Max: 10})
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, e.gcommit(tp, "g", "a", 1, map[int]int64{0: 0}), store.ErrNotFound)
		require.Zero(t, e.count(`SELECT count(*) FROM ferry.consumer_groups WHERE topic_id = $1`, tp.ID), "a poll must not recreate the group")
	})
}

// fetchedEventually waits until the one session of the pool named appName
// is idle after a statement outside a transaction: a poll's fetch, after
// its transaction joined the member (whatever SQL either runs).
func (e *env) fetchedEventually(appName string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		var n int
		err := e.pool.QueryRow(e.ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND state = 'idle'
				AND query <> '' AND lower(query) NOT IN ('begin', 'commit', 'rollback')`, appName).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond, "%s never fetched", appName)
}

// ConsumerGroupLags: per group and partition, head - committed (never below 0),
// and per group a row with partition -1 holding the member count, sorted;
// it changes nothing (an expired member counts until a poll or describe
// evicts it).
func TestGroupLags(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	e.publishTo(tp, 0, 5)
	e.publishTo(tp, 1, 3)
	a := e.gpoll(tp, "g", "a", 100)
	require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 2}))
	e.gpoll(tp, "h", "a", 0)
	e.gpoll(tp, "h", "b", 0)
	e.gpollStart(tp, "latest", "x", store.StartPosition{}, 0)

	lags := func() []store.ConsumerGroupLag {
		l, err := store.ConsumerGroupLags(e.ctx, e.pool)
		require.NoError(t, err)
		return l
	}
	row := func(g string, p int, lag int64) store.ConsumerGroupLag {
		return store.ConsumerGroupLag{TopicID: tp.ID, Group: g, Partition: p, Lag: lag}
	}
	want := []store.ConsumerGroupLag{
		row("g", -1, 1), row("g", 0, 2), row("g", 1, 3),
		row("h", -1, 2), row("h", 0, 5), row("h", 1, 3),
		row("latest", -1, 1), row("latest", 0, 0), row("latest", 1, 0),
	}
	require.Equal(t, want, lags())

	e.expireMember(tp, "h", "b")
	require.Equal(t, want, lags(), "ConsumerGroupLags evicts nothing")
	require.Equal(t, 1, e.gdescribe(tp, "h").Refresh.Evicted)
	want[3].Lag = 1
	require.Equal(t, want, lags())
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
