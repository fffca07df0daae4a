package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// Fencing: once a member joins and takes partitions over, the first
// member's commits naming the old generation are refused for the moved
// partitions — the whole request, including the partitions it kept — and
// accepted for the kept ones alone. Commits naming a future generation,
// by non-members or for partitions one got only later are refused;
// offsets beyond the head are a validation error; nothing refused writes.
func TestGroupCommitFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp := e.filledTopic("log", 4, 5) // offsets 0..4
	none := []int64{-1, -1, -1, -1}

	a1 := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, []int{0, 1, 2, 3}, a1.Partitions)
	require.Len(t, a1.Events, 20)
	require.True(t, a1.Rebalanced)
	g1 := a1.Generation

	b := e.gpoll(tp, "g", "b", 100)
	g2 := b.Generation
	require.Greater(t, g2, g1)
	require.True(t, b.Rebalanced)
	require.Len(t, b.Partitions, 2)
	var kept []int
	for p := range 4 {
		if !slices.Contains(b.Partitions, p) {
			kept = append(kept, p)
		}
	}
	moved := b.Partitions
	// b starts its partitions at committed + 1: a committed nothing.
	got := byPartition(b.Events)
	require.Len(t, got, 2)
	for _, p := range moved {
		require.Equal(t, span(0, 4), got[p], "partition %d", p)
	}

	// a, a zombie for the moved partitions: refused as a whole.
	err := e.gcommit(tp, "g", "a", g1, map[int]int64{moved[0]: 4, kept[0]: 4, kept[1]: 4})
	require.ErrorIs(t, err, store.ErrFenced)
	require.ErrorIs(t, err, store.ErrConflict)
	require.Equal(t, none, e.committedOffsets(tp, "g"), "all or nothing: the kept partitions are not committed either")
	require.ErrorIs(t, e.gcommit(tp, "g", "a", g1, map[int]int64{moved[1]: 2}), store.ErrFenced)
	require.ErrorIs(t, e.gcommit(tp, "g", "a", g2, map[int]int64{moved[1]: 2}), store.ErrFenced, "not a's in the current generation either")
	require.Equal(t, none, e.committedOffsets(tp, "g"))

	// The partitions a kept, naming the generation of its batch: accepted.
	require.NoError(t, e.gcommit(tp, "g", "a", g1, map[int]int64{kept[0]: 4, kept[1]: 2}))
	want := slices.Clone(none)
	want[kept[0]], want[kept[1]] = 4, 2
	require.Equal(t, want, e.committedOffsets(tp, "g"))
	require.NoError(t, e.gcommit(tp, "g", "a", g2, map[int]int64{kept[1]: 3}), "the current generation")
	want[kept[1]] = 3

	// b got its partitions in g2: naming g1 is fenced, g2 accepted.
	require.ErrorIs(t, e.gcommit(tp, "g", "b", g1, map[int]int64{moved[0]: 1}), store.ErrFenced)
	require.NoError(t, e.gcommit(tp, "g", "b", g2, map[int]int64{moved[0]: 1}))
	want[moved[0]] = 1
	require.Equal(t, want, e.committedOffsets(tp, "g"))

	// A generation that does not exist yet.
	require.ErrorIs(t, e.gcommit(tp, "g", "a", g2+1, map[int]int64{kept[1]: 4}), store.ErrFenced)
	// Beyond the head (4), or no such partition: invalid, nothing written.
	requireValidation(t, e.gcommit(tp, "g", "a", g2, map[int]int64{kept[0]: 4, kept[1]: 5}), fmt.Sprintf("offsets.%d", kept[1]))
	requireValidation(t, e.gcommit(tp, "g", "a", g2, map[int]int64{kept[1]: 4, 9: 0}), "offsets.9")
	// A consumer that is not a member.
	require.ErrorIs(t, e.gcommit(tp, "g", "zed", g2, map[int]int64{kept[1]: 4}), store.ErrFenced)
	require.Equal(t, want, e.committedOffsets(tp, "g"))
	// A group that does not exist.
	require.ErrorIs(t, e.gcommit(tp, "nope", "a", g2, map[int]int64{0: 0}), store.ErrNotFound)

	// a's next poll is in g2, with its kept partitions only.
	a2 := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, g2, a2.Generation)
	require.False(t, a2.Rebalanced)
	require.Equal(t, kept, a2.Partitions)
	require.Empty(t, a2.Events, "a read them in g1 already")
}

// holdTracer stops the first query whose SQL contains match before it is
// sent, until release is closed; arrived is closed when it stops there.
type holdTracer struct {
	match   string
	once    sync.Once
	arrived chan struct{}
	release chan struct{}
}

func (h *holdTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, h.match) {
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
	h := &holdTracer{match: match, arrived: make(chan struct{}), release: make(chan struct{})}
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

// A fetch in flight when its member loses partitions is fenced: the poll
// read the events (of the generation it joined in), a rebalance or a seek
// commits, then the poll advances its positions — only of the partitions
// it still owns in its generation, and it returns only their events. The
// new owner's (or the seek's) position is not moved by the zombie.
func TestGroupFetchFenced(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*env, store.Topic, <-chan store.ConsumerGroupPollResult, func()) {
		e, tp := newTopicEnv(t, "log", 2)
		e.publishTo(tp, 0, 3)
		e.publishTo(tp, 1, 3)
		pool, h, release := e.heldPool("advanced AS")
		out := make(chan store.ConsumerGroupPollResult, 1)
		go func() {
			res, err := store.ConsumerGroupPoll(e.ctx, pool, nil, store.ConsumerGroupPollParams{
				Topic: tp, Group: "g", Consumer: "a", SessionTimeout: groupSession, Start: store.StartPosition{Earliest: true}, Max: 100,
			})
			assertNoErr(t, err, "a's poll")
			out <- res
		}()
		select {
		case <-h.arrived: // a joined, owns both partitions, read 0..2 of each
		case res := <-out:
			t.Fatalf("a's poll ended before advancing: %+v", res)
		}
		return e, tp, out, release
	}

	t.Run("Rebalance", func(t *testing.T) {
		t.Parallel()
		e, tp, out, release := setup(t)
		b := e.gpoll(tp, "g", "b", 1)
		require.Len(t, b.Partitions, 1)
		moved := b.Partitions[0]
		kept := 1 - moved
		require.Equal(t, []int64{0}, eventOffsets(b.Events))
		release()
		a := <-out
		require.Less(t, a.Generation, b.Generation)
		require.Equal(t, []int{0, 1}, a.Partitions, "owned when it polled")
		require.Equal(t, map[int][]int64{kept: span(0, 2)}, byPartition(a.Events), "the moved partition's events are dropped")
		// b goes on where it stopped; a's next poll has only its partition.
		require.Equal(t, map[int][]int64{moved: span(1, 2)}, byPartition(e.gpoll(tp, "g", "b", 100).Events))
		a2 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, b.Generation, a2.Generation)
		require.Equal(t, []int{kept}, a2.Partitions)
		require.Empty(t, a2.Events, "the kept partition's position was advanced")
	})

	t.Run("Seek", func(t *testing.T) {
		t.Parallel()
		e, tp, out, release := setup(t)
		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Offsets: map[int]int64{1: 1}}))
		release()
		a := <-out
		require.Equal(t, map[int][]int64{0: span(0, 2)}, byPartition(a.Events), "partition 1's events are dropped")
		a2 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, a.Generation+1, a2.Generation)
		require.Equal(t, map[int][]int64{1: span(1, 2)}, byPartition(a2.Events), "from the seek's position")
	})
}

// A partition's new owner starts after the committed offset as it is
// when the partition moves, also when the previous owner's commit lands
// while the rebalance is under way (after the rebalancing poll read the
// group, before it moved the partition): the new owner never gets events
// the group already committed.
func TestGroupNewOwnerStartsAfterConcurrentCommit(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	e.publishTo(tp, 0, 5)
	e.publishTo(tp, 1, 5)
	a := e.gpoll(tp, "g", "a", 100)
	require.Len(t, a.Events, 10)

	// b joins; its poll stops just before it hands a partition over.
	pool, h, release := e.heldPool("SET owner = m.owner")
	bOut := make(chan store.ConsumerGroupPollResult, 1)
	go func() {
		res, err := store.ConsumerGroupPoll(e.ctx, pool, nil, store.ConsumerGroupPollParams{
			Topic: tp, Group: "g", Consumer: "b", SessionTimeout: groupSession, Max: 100,
		})
		assertNoErr(t, err, "b's poll")
		bOut <- res
	}()
	select {
	case <-h.arrived:
	case res := <-bOut:
		t.Fatalf("b's poll ended without moving a partition: %+v", res)
	}

	// a commits everything it read, naming its generation. It may get
	// through now (a still owns both partitions) or wait for b's poll (and
	// then be fenced, as b took one): either is right.
	commitPool := e.newNamedPool(2, "committer")
	commitOut := make(chan error, 1)
	go func() {
		commitOut <- store.ConsumerGroupCommit(e.ctx, commitPool, store.ConsumerGroupCommitParams{
			Topic: tp, Group: "g", Consumer: "a", Generation: a.Generation, Offsets: map[int]int64{0: 4, 1: 4},
		})
	}()
	outcome, _ := doneOrWaiting(t, commitOut, func() (int, error) { return e.lockWaiters("committer") },
		"a's commit neither ended nor waited")
	release()
	b := <-bOut
	commitErr := outcome()
	if commitErr != nil {
		require.ErrorIs(t, commitErr, store.ErrFenced)
	}
	t.Logf("a's commit: %v", commitErr)

	require.Len(t, b.Partitions, 1)
	moved := b.Partitions[0]
	committed := e.committedOffsets(tp, "g")[moved]
	got := byPartition(b.Events)[moved]
	require.Equal(t, span(committed+1, 4), append([]int64{}, got...),
		"b's first events of partition %d, committed %d (a's commit: %v)", moved, committed, commitErr)
}

// A member that took a partition over reads it from the committed offset
// + 1: what the previous owner read but did not commit is read again,
// what it committed is not.
func TestGroupResumeAfterRebalance(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 1)
	res := e.publishTo(tp, 0, 10)

	a := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, span(0, 9), eventOffsets(a.Events))
	require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 5}))
	e.expireMember(tp, "g", "a")

	b := e.gpoll(tp, "g", "b", 100)
	require.Equal(t, 1, b.Evicted)
	require.True(t, b.Rebalanced)
	require.Greater(t, b.Generation, a.Generation)
	require.Equal(t, []int{0}, b.Partitions)
	require.Equal(t, span(6, 9), eventOffsets(b.Events))
	require.Equal(t, publishedIDs(res[6:]), eventIDs(b.Events))

	// The evicted member is a zombie now.
	require.ErrorIs(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 9}), store.ErrFenced)
	g := e.gdescribe(tp, "g")
	require.Len(t, g.Members, 1)
	require.Equal(t, "b", g.Members[0].Consumer)
	require.Equal(t, []int{0}, g.Members[0].Partitions)
	require.Equal(t, int64(5), g.Partitions[0].CommittedOffset)
}

// Commits only move forward; a seek to the earliest event moves back (to
// before the oldest retained event), bumps the generation, fences batches
// read before it, and the members' next fetch starts there.
func TestGroupCommitMonotonicAndSeekEarliest(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 1)
	e.publishTo(tp, 0, 10)

	a := e.gpoll(tp, "g", "a", 100)
	require.Len(t, a.Events, 10)
	require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 8}))
	require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 3}), "a lower offset is no error")
	require.Equal(t, []int64{8}, e.committedOffsets(tp, "g"), "and changes nothing")

	require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Start: store.StartPosition{Earliest: true}}))
	g := e.gdescribe(tp, "g")
	require.Equal(t, a.Generation+1, g.Generation)
	require.Equal(t, int64(-1), g.Partitions[0].CommittedOffset)
	require.Equal(t, int64(10), g.Partitions[0].Lag)
	require.ErrorIs(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 9}), store.ErrFenced, "a batch read before the seek")
	require.Equal(t, int64(-1), e.committedOffsets(tp, "g")[0])

	a2 := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, g.Generation, a2.Generation)
	require.Equal(t, span(0, 9), eventOffsets(a2.Events))
	require.NoError(t, e.gcommit(tp, "g", "a", a2.Generation, map[int]int64{0: 9}))

	// With the oldest events gone, earliest is the oldest retained: no
	// event counts as skipped by retention.
	_, err := e.pool.Exec(e.ctx, `DELETE FROM ferry.events WHERE topic_id = $1 AND partition = 0 AND "offset" < 3`, tp.ID)
	require.NoError(t, err)
	require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Start: store.StartPosition{Earliest: true}}))
	a3 := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, a2.Generation+1, a3.Generation)
	require.Zero(t, a3.Skipped)
	require.Equal(t, span(3, 9), eventOffsets(a3.Events))
	g = e.gdescribe(tp, "g")
	require.Equal(t, int64(2), g.Partitions[0].CommittedOffset)
	require.Zero(t, g.Partitions[0].ExpiredSkipped)

	// Seeking a group that does not exist.
	err = store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "nope", Start: store.StartPosition{Earliest: true}})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestGroupSeek(t *testing.T) {
	t.Parallel()

	// Latest: the next poll returns nothing until a publish, then exactly
	// the new events.
	t.Run("Latest", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "log", 2)
		e.publishTo(tp, 0, 3)
		e.publishTo(tp, 1, 4)
		// The group is read halfway: nothing committed, a batch pending.
		a := e.gpoll(tp, "g", "a", 2)
		require.Len(t, a.Events, 2)

		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Latest: true}))
		g := e.gdescribe(tp, "g")
		require.Equal(t, a.Generation+1, g.Generation)
		require.Equal(t, []int64{2, 3}, e.committedOffsets(tp, "g"))
		for _, p := range g.Partitions {
			require.Zero(t, p.Lag)
		}
		a2 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, g.Generation, a2.Generation)
		require.Empty(t, a2.Events)

		r0 := e.publishTo(tp, 0, 2)
		r1 := e.publishTo(tp, 1, 1)
		a3 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, map[int][]int64{0: {3, 4}, 1: {4}}, byPartition(a3.Events))
		require.ElementsMatch(t, append(publishedIDs(r0), publishedIDs(r1)...), eventIDs(a3.Events))
		require.Empty(t, e.gpoll(tp, "g", "a", 100).Events)
	})

	// Time: per partition, the first event published at or after it; a
	// time after every event is the next offset.
	t.Run("Time", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "log", 2)
		// Three publishes (three publish times), of different sizes per
		// partition.
		for i := range 3 {
			e.publishTo(tp, 0, 1+i)
			e.publishTo(tp, 1, 3-i)
		}
		a := e.gpoll(tp, "g", "a", 100)
		all := map[int][]store.Event{}
		for _, ev := range a.Events {
			all[ev.Partition] = append(all[ev.Partition], ev)
		}
		require.Len(t, all[0], 6)
		require.Len(t, all[1], 6)
		require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 5, 1: 5}))
		// The second publish to partition 1 (offsets 3, 4).
		at := all[1][3].PublishedAt
		require.True(t, all[1][2].PublishedAt.Before(at))
		wantFrom := map[int]int64{}
		for p, evs := range all {
			wantFrom[p] = int64(len(evs))
			for _, ev := range evs {
				if !ev.PublishedAt.Before(at) {
					wantFrom[p] = ev.Offset
					break
				}
			}
		}
		require.Equal(t, int64(3), wantFrom[1])
		require.Less(t, wantFrom[0], int64(6))

		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Start: store.StartPosition{Time: &at}}))
		require.Equal(t, []int64{wantFrom[0] - 1, wantFrom[1] - 1}, e.committedOffsets(tp, "g"))
		a2 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, map[int][]int64{0: span(wantFrom[0], 5), 1: span(wantFrom[1], 5)}, byPartition(a2.Events))

		later := all[0][5].PublishedAt.Add(time.Hour)
		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Start: store.StartPosition{Time: &later}}))
		require.Equal(t, []int64{5, 5}, e.committedOffsets(tp, "g"))
		require.Empty(t, e.gpoll(tp, "g", "a", 100).Events)
	})

	// Explicit offsets (the next offset to read): only the named
	// partitions move, and only their batches are fenced.
	t.Run("Offsets", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		tp := e.filledTopic("log", 3, 5)
		a := e.gpoll(tp, "g", "a", 100)
		require.Len(t, a.Events, 15)
		require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 3, 1: 4, 2: 4}))

		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Offsets: map[int]int64{1: 2}}))
		require.Equal(t, []int64{3, 1, 4}, e.committedOffsets(tp, "g"))
		require.ErrorIs(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{1: 4}), store.ErrFenced, "partition 1 moved")
		require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 4}), "partition 0 did not")
		a2 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, a.Generation+1, a2.Generation)
		require.Equal(t, map[int][]int64{1: span(2, 4)}, byPartition(a2.Events))
		require.Equal(t, []int64{4, 1, 4}, e.committedOffsets(tp, "g"))

		// Up to the next offset (5) is allowed; beyond it, or a partition
		// the topic lacks, is invalid and changes nothing.
		requireValidation(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Offsets: map[int]int64{0: 0, 2: 6}}), "offsets.2")
		requireValidation(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Offsets: map[int]int64{7: 0}}), "offsets.7")
		require.Equal(t, []int64{4, 1, 4}, e.committedOffsets(tp, "g"))
		require.Equal(t, a2.Generation, e.gdescribe(tp, "g").Generation)
		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Offsets: map[int]int64{1: 5, 2: 0}}))
		require.Equal(t, []int64{4, 4, -1}, e.committedOffsets(tp, "g"))
		require.Equal(t, map[int][]int64{2: span(0, 4)}, byPartition(e.gpoll(tp, "g", "a", 100).Events))
	})
}

// A poll returns at most Max events, shared among the member's partitions
// so that none with events starves (Max is at least their number here),
// each partition's in offset order from its position; the next poll goes
// on from where each partition stopped.
func TestGroupPollMax(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 4)
	for p, n := range []int{5, 1, 0, 9} {
		if n > 0 {
			e.publishTo(tp, p, n)
		}
	}
	a := e.gpoll(tp, "g", "a", 4)
	require.Len(t, a.Events, 4)
	got := byPartition(a.Events)
	require.Len(t, got, 3, "every partition with events gets some: %v", got)
	for p, offs := range got {
		require.Equal(t, span(0, int64(len(offs)-1)), offs, "partition %d", p)
	}
	rest := byPartition(e.gpoll(tp, "g", "a", 100).Events)
	for p, n := range []int{5, 1, 0, 9} {
		if n > 0 {
			require.Equal(t, span(0, int64(n-1)), append(got[p], rest[p]...), "partition %d over both polls", p)
		}
	}
	require.Empty(t, e.gpoll(tp, "g", "a", 100).Events)
	require.Equal(t, []int64{-1, -1, -1, -1}, e.committedOffsets(tp, "g"), "reading commits nothing")
}

// A group is created where its first poll's start says: before the
// oldest retained event, after the newest, or before the first event
// published at or after a time; later polls' starts change nothing.
func TestGroupStartPositions(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	for range 3 { // three batches, each a publish to 0 then one to 1
		e.publishTo(tp, 0, 2)
		e.publishTo(tp, 1, 1)
	}
	// Partition 0: offsets 0..5, partition 1: 0..2.
	_, err := e.pool.Exec(e.ctx, `DELETE FROM ferry.events WHERE topic_id = $1 AND partition = 0 AND "offset" < 1`, tp.ID)
	require.NoError(t, err)
	evs, _ := e.read(store.ReadParams{Topic: tp, Partition: 0})
	require.Equal(t, span(1, 5), eventOffsets(evs))
	at := evs[1].PublishedAt // offset 2: the second batch's first publish

	e.gpoll(tp, "earliest", "a", 0)
	require.Equal(t, []int64{0, -1}, e.committedOffsets(tp, "earliest"))
	e.gpollStart(tp, "latest", "a", store.StartPosition{}, 0)
	require.Equal(t, []int64{5, 2}, e.committedOffsets(tp, "latest"))
	e.gpollStart(tp, "time", "a", store.StartPosition{Time: &at}, 0)
	require.Equal(t, []int64{1, 0}, e.committedOffsets(tp, "time"))
	later := at.Add(time.Hour)
	e.gpollStart(tp, "future", "a", store.StartPosition{Time: &later}, 0)
	require.Equal(t, []int64{5, 2}, e.committedOffsets(tp, "future"))

	// An existing group keeps its position whatever a poll's start.
	res := e.gpollStart(tp, "latest", "b", store.StartPosition{Earliest: true}, 100)
	require.Empty(t, res.Events)
	require.Equal(t, []int64{5, 2}, e.committedOffsets(tp, "latest"))
	require.Zero(t, e.gdescribe(tp, "earliest").Partitions[0].ExpiredSkipped)
}

// Retention removed events the group had not read: the next poll moves
// the committed offset to before the oldest retained event, counts the
// events skipped once (in the poll's answer and the partition's
// expired_skipped), and reads on from the oldest retained event.
func TestGroupRetentionFixUp(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	a := e.gpoll(tp, "g", "a", 100) // creates the group at -1
	require.Empty(t, a.Events)
	r0 := e.publishTo(tp, 0, 10)
	e.publishTo(tp, 1, 3)
	_, err := e.pool.Exec(e.ctx, `DELETE FROM ferry.events WHERE topic_id = $1 AND partition = 0 AND "offset" < 5`, tp.ID)
	require.NoError(t, err)

	a1 := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, int64(5), a1.Skipped)
	require.Equal(t, map[int][]int64{0: span(5, 9), 1: span(0, 2)}, byPartition(a1.Events))
	require.Subset(t, eventIDs(a1.Events), publishedIDs(r0[5:]))
	g := e.gdescribe(tp, "g")
	require.Zero(t, g.Refresh.Skipped)
	require.Equal(t, int64(4), g.Partitions[0].CommittedOffset)
	require.Equal(t, int64(5), g.Partitions[0].ExpiredSkipped)
	require.Equal(t, int64(5), g.Partitions[0].Lag)
	require.Equal(t, int64(-1), g.Partitions[1].CommittedOffset)
	require.Zero(t, g.Partitions[1].ExpiredSkipped)

	a2 := e.gpoll(tp, "g", "a", 100)
	require.Zero(t, a2.Skipped, "counted once")
	require.Empty(t, a2.Events)
	g = e.gdescribe(tp, "g")
	require.Equal(t, int64(5), g.Partitions[0].ExpiredSkipped)
	require.Equal(t, int64(4), g.Partitions[0].CommittedOffset)
}

// The retention fix-up never moves a committed offset back: a commit that
// lands while a refresh is moving the position up to the oldest retained
// event (here: after the refresh's snapshot, before it gets the row) is
// kept.
func TestGroupRetentionFixUpKeepsConcurrentCommit(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 1)
	e.gpoll(tp, "g", "a", 100) // creates the group at -1
	e.publishTo(tp, 0, 10)
	a := e.gpoll(tp, "g", "a", 100)
	require.Len(t, a.Events, 10) // read, not committed yet
	_, err := e.pool.Exec(e.ctx, `DELETE FROM ferry.events WHERE topic_id = $1 AND "offset" < 5`, tp.ID)
	require.NoError(t, err)

	// A transaction holds the group's partition row; a describe's refresh
	// waits for it in its fix-up.
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	_, err = tx.Exec(e.ctx, `SELECT 1 FROM ferry.group_partitions WHERE group_id = $1 FOR UPDATE`, e.groupID(tp, "g"))
	require.NoError(t, err)
	describePool := e.newNamedPool(2, "describer")
	out := make(chan store.ConsumerGroup, 1)
	go func() {
		g, err := store.ConsumerGroupDescribe(e.ctx, describePool, tp, "g")
		assertNoErr(t, err, "describe")
		out <- g
	}()
	e.activityWaitingEventually("describer")
	// a's commit, in that transaction, commits first.
	require.NoError(t, store.ConsumerGroupCommit(e.ctx, tx, store.ConsumerGroupCommitParams{
		Topic: tp, Group: "g", Consumer: "a", Generation: a.Generation, Offsets: map[int]int64{0: 7},
	}))
	require.NoError(t, tx.Commit(e.ctx))
	g := <-out
	t.Logf("describe saw: committed %d, skipped %d", g.Partitions[0].CommittedOffset, g.Refresh.Skipped)
	after := e.gdescribe(tp, "g").Partitions[0]
	require.Equal(t, int64(7), after.CommittedOffset, "a's commit was undone")
	require.Contains(t, []int64{0, 5}, after.ExpiredSkipped)
}

// Partitions added to the topic join the group at their beginning (even
// when the group started at the latest event) on the next poll, and the
// assignment covers them.
func TestGroupTopicGrows(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	e.publishTo(tp, 0, 2)
	e.publishTo(tp, 1, 2)
	a := e.gpollStart(tp, "g", "a", store.StartPosition{}, 100) // at the latest
	require.Empty(t, a.Events)
	b := e.gpollStart(tp, "g", "b", store.StartPosition{}, 100)
	require.Empty(t, b.Events)
	require.Len(t, b.Partitions, 1)
	require.Equal(t, []int64{1, 1}, e.committedOffsets(tp, "g"))

	tp4, created, err := store.TopicUpsert(e.ctx, e.pool, "log", store.TopicPatch{Partitions: ptr(4)})
	require.NoError(t, err)
	require.False(t, created)
	r2 := e.publishTo(tp4, 2, 2)
	r3 := e.publishTo(tp4, 3, 3)

	a2 := e.gpoll(tp4, "g", "a", 100)
	require.True(t, a2.Rebalanced)
	require.Greater(t, a2.Generation, b.Generation)
	require.Len(t, a2.Partitions, 2)
	g := e.gdescribe(tp4, "g")
	require.Len(t, g.Partitions, 4)
	require.Equal(t, []int64{1, 1, -1, -1}, e.committedOffsets(tp4, "g"))
	b2 := e.gpoll(tp4, "g", "b", 100)
	require.Equal(t, a2.Generation, b2.Generation)
	require.Len(t, b2.Partitions, 2)
	require.ElementsMatch(t, []int{0, 1, 2, 3}, append(slices.Clone(a2.Partitions), b2.Partitions...))
	aKept := 1 - b.Partitions[0] // of partitions 0 and 1, the one b did not take
	require.Contains(t, a2.Partitions, aKept, "sticky")
	require.Contains(t, b2.Partitions, b.Partitions[0], "sticky")

	got := byPartition(append(slices.Clone(a2.Events), b2.Events...))
	require.Equal(t, map[int][]int64{2: span(0, 1), 3: span(0, 2)}, got)
	require.ElementsMatch(t, append(publishedIDs(r2), publishedIDs(r3)...), eventIDs(append(slices.Clone(a2.Events), b2.Events...)))
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

// A long poll of a member whose partitions have nothing new waits: until
// its wait ends, or — well before, with no fallback poll within it — as
// soon as a publish to the topic is announced.
func TestGroupPollLongPoll(t *testing.T) {
	t.Parallel()
	type outcome struct {
		res     store.ConsumerGroupPollResult
		err     error
		elapsed time.Duration
	}
	setup := func(t *testing.T, wait, fallback time.Duration) (*env, store.Topic, *store.Notifier, store.ConsumerGroupPollResult, <-chan outcome) {
		e, tp := newTopicEnv(t, "log", 2)
		n := e.runNotifier(e.pool)
		pollPool := e.newNamedPool(1, "grouppoll")
		first := e.gpoll(tp, "g", "a", 10) // joins: a owns both partitions
		require.Equal(t, []int{0, 1}, first.Partitions)
		out := inBackground(func(start time.Time) outcome {
			res, err := store.ConsumerGroupPoll(e.ctx, pollPool, n, store.ConsumerGroupPollParams{
				Topic: tp, Group: "g", Consumer: "a", SessionTimeout: groupSession, Max: 10,
				Wait: wait, FallbackPoll: fallback,
			})
			return outcome{res, err, time.Since(start)}
		})
		return e, tp, n, first, out
	}

	t.Run("EmptyAfterWait", func(t *testing.T) {
		t.Parallel()
		_, _, _, first, out := setup(t, 300*time.Millisecond, 50*time.Millisecond)
		r := <-out
		require.NoError(t, r.err)
		require.Empty(t, r.res.Events)
		require.Equal(t, first.Generation, r.res.Generation)
		require.GreaterOrEqual(t, r.elapsed, 300*time.Millisecond, "a poll that finds nothing waits its whole wait")
	})

	t.Run("WokenByPublish", func(t *testing.T) {
		t.Parallel()
		e, tp, n, first, out := setup(t, 5*time.Second, 10*time.Second)
		// Its first fetch found nothing: it waits.
		e.fetchedEventually("grouppoll")
		res := e.publishTo(tp, 1, 1)
		sentAt := time.Now()
		n.Published([]int64{store.TopicWakeKey(tp.ID)})
		r := <-out
		require.NoError(t, r.err)
		require.Less(t, time.Since(sentAt), 2500*time.Millisecond, "woken by the publish, not by the end of the wait")
		require.Equal(t, first.Generation, r.res.Generation)
		require.Equal(t, []string{res[0].ID}, eventIDs(r.res.Events), "the poll returned after %v", r.elapsed)
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

// Exclusive ownership under concurrency: six members poll in loops while
// two publishers publish; some join late, one leaves for good, one keeps
// timing out and coming back (each time, while evicted, its commit of what
// it read is refused). Each member commits what it received. Then:
//   - no (generation, partition) is in two members' poll results, and
//     every event a poll returns is of one of its partitions, the event
//     published at that offset;
//   - within a member's consecutive polls of one generation, offsets per
//     partition go up one by one (no repeats, no gaps);
//   - once the publishers are done, the members commit everything, and
//     every partition's offsets 0..head were received (at least once).
func TestGroupExclusiveOwnershipUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const (
		partitions = 8
		members    = 6
		publishers = 2
		maxEvents  = 1000
		maxTime    = 4 * time.Second
	)
	tp := e.topic("log", store.TopicPatch{Partitions: ptr(partitions)})
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	type pollRecord struct {
		session int // the member's how-many-th membership
		gen     int64
		parts   []int
		events  []store.Event
	}
	type stats struct{ commits, fenced, expiries int }
	var (
		records    [members][]pollRecord // each member's polls, in order
		memberStat [members]stats
		pubMu      sync.Mutex
		published  = map[[2]int64]string{} // (partition, offset) → event id
		total      atomic.Int64
		bounces    atomic.Int64 // of m4
		lateOnce   sync.Once
		late       = make(chan struct{}) // late members join once some is published
		pubDone    = make(chan struct{})
		drained    = make(chan struct{})
		pubWG      sync.WaitGroup
		memberWG   sync.WaitGroup
		deadline   = time.Now().Add(maxTime)
	)
	closeLate := func() { lateOnce.Do(func() { close(late) }) }

	for w := range publishers {
		pubWG.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			// Until enough is published and the bouncing member came back
			// a few times (or time is up).
			for (total.Load() < maxEvents || bounces.Load() < 3) && time.Now().Before(deadline) {
				evs := make([]store.PublishEvent, 1+rng.IntN(10))
				for i := range evs {
					evs[i] = store.PublishEvent{Type: "t"}
					if rng.IntN(3) > 0 {
						evs[i].Key = ptr(fmt.Sprintf("k%d", rng.IntN(30)))
					}
				}
				res, _, err := store.EventPublish(e.ctx, e.pool, tp, evs)
				if !assertNoErr(t, err, "publish") {
					return
				}
				pubMu.Lock()
				for _, r := range res {
					published[[2]int64{int64(r.Partition), r.Offset}] = r.ID
				}
				pubMu.Unlock()
				if total.Add(int64(len(evs))) >= maxEvents/4 {
					closeLate()
				}
			}
		})
	}

	// evict makes member name time out and has it evicted (by a describe,
	// unless another member's poll did it first).
	evict := func(name string) error {
		if err := expireMember(e.ctx, e, tp, "g", name); err != nil {
			return err
		}
		g, err := store.ConsumerGroupDescribe(e.ctx, e.pool, tp, "g")
		if err != nil {
			return err
		}
		for _, m := range g.Members {
			if m.Consumer == name {
				return fmt.Errorf("%s not evicted", name)
			}
		}
		return nil
	}

	for i := range members {
		memberWG.Go(func() {
			name := fmt.Sprintf("m%d", i)
			rng := rand.New(rand.NewPCG(seed, uint64(100+i)))
			if i >= 4 { // late joiners
				select {
				case <-late:
				case <-drained:
					return
				}
			}
			session := 0
			pos := map[int]int64{} // per owned partition, the last offset received
			for seq := 1; ; seq++ {
				select {
				case <-drained:
					return
				default:
				}
				res, err := store.ConsumerGroupPoll(e.ctx, e.pool, nil, store.ConsumerGroupPollParams{
					Topic: tp, Group: "g", Consumer: name, SessionTimeout: groupSession,
					Start: store.StartPosition{Earliest: true}, Max: 1 + rng.IntN(12),
				})
				if !assertNoErr(t, err, name+" poll") {
					return
				}
				records[i] = append(records[i], pollRecord{session, res.Generation, res.Partitions, res.Events})
				for _, ev := range res.Events {
					pos[ev.Partition] = ev.Offset
				}
				for p := range pos {
					if !slices.Contains(res.Partitions, p) {
						delete(pos, p)
					}
				}
				if len(pos) > 0 {
					err := store.ConsumerGroupCommit(e.ctx, e.pool, store.ConsumerGroupCommitParams{
						Topic: tp, Group: "g", Consumer: name, Generation: res.Generation, Offsets: maps.Clone(pos),
					})
					memberStat[i].commits++
					if errors.Is(err, store.ErrFenced) {
						memberStat[i].fenced++ // rebalanced meanwhile: the next poll tells
					} else if !assertNoErr(t, err, name+" commit") {
						return
					}
				}
				chaos := !isDone(pubDone)
				leave := i == 3 && seq == 10            // times out for good
				bounce := i == 4 && chaos && seq%5 == 0 // times out, comes back
				if leave || bounce {
					if !assertNoErr(t, evict(name), "evict "+name) {
						return
					}
					memberStat[i].expiries++
					if len(pos) > 0 {
						err := store.ConsumerGroupCommit(e.ctx, e.pool, store.ConsumerGroupCommitParams{
							Topic: tp, Group: "g", Consumer: name, Generation: res.Generation, Offsets: maps.Clone(pos),
						})
						if !errors.Is(err, store.ErrFenced) {
							t.Errorf("%s evicted, committing %v in generation %d: got %v, want fenced", name, pos, res.Generation, err)
						}
					}
					if leave {
						return
					}
					bounces.Add(1)
					session++
					pos = map[int]int64{}
				}
				pause(time.Duration(rng.IntN(2)) * time.Millisecond)
			}
		})
	}

	pubWG.Wait()
	closeLate()
	close(pubDone)
	heads := e.offsets(tp)
	// The members drain the topic: every partition committed up to its head.
	gid := e.groupID(tp, "g")
	drainDeadline := time.Now().Add(15 * time.Second)
	for {
		behind := e.count(`
			SELECT count(*) FROM ferry.group_partitions gp
			JOIN ferry.topic_partitions tp ON tp.topic_id = $2 AND tp.partition = gp.partition
			WHERE gp.group_id = $1 AND gp.committed_offset < tp.next_offset - 1`, gid, tp.ID)
		if behind == 0 || time.Now().After(drainDeadline) || t.Failed() {
			if behind > 0 {
				t.Errorf("%d partitions not drained: %+v", behind, e.gdescribe(tp, "g"))
			}
			break
		}
		pause(10 * time.Millisecond)
	}
	close(drained)
	memberWG.Wait()
	if t.Failed() {
		return
	}

	// Every published event is in the log where its answer said.
	var sum int64
	for _, h := range heads {
		sum += h.HeadOffset + 1
	}
	require.Equal(t, int64(len(published)), sum)
	require.GreaterOrEqual(t, sum, int64(maxEvents/4))

	owners := map[[2]int64]string{} // (generation, partition) → member
	received := map[[2]int64]int{}  // (partition, offset) → times
	polls, gens := 0, map[int64]bool{}
	for i, recs := range records {
		name := fmt.Sprintf("m%d", i)
		var (
			session = -1
			gen     int64
			last    map[int]int64
		)
		for k, r := range recs {
			polls++
			gens[r.gen] = true
			for _, p := range r.parts {
				key := [2]int64{r.gen, int64(p)}
				if o, ok := owners[key]; ok && o != name {
					t.Fatalf("generation %d: partition %d in the polls of %s and %s", r.gen, p, o, name)
				}
				owners[key] = name
			}
			if r.session != session || r.gen != gen {
				session, gen, last = r.session, r.gen, map[int]int64{}
			}
			for _, ev := range r.events {
				require.Contains(t, r.parts, ev.Partition, "%s poll %d: an event of a partition it does not own", name, k)
				require.Equal(t, published[[2]int64{int64(ev.Partition), ev.Offset}], ev.ID,
					"%s poll %d: partition %d offset %d", name, k, ev.Partition, ev.Offset)
				if prev, ok := last[ev.Partition]; ok {
					require.Equal(t, prev+1, ev.Offset, "%s poll %d, generation %d, partition %d: after %d", name, k, r.gen, ev.Partition, prev)
				}
				last[ev.Partition] = ev.Offset
				received[[2]int64{int64(ev.Partition), ev.Offset}]++
			}
		}
	}
	again := 0
	for _, h := range heads {
		for o := int64(0); o <= h.HeadOffset; o++ {
			n := received[[2]int64{int64(h.Partition), o}]
			require.NotZero(t, n, "partition %d offset %d (head %d) never received", h.Partition, o, h.HeadOffset)
			again += n - 1
		}
	}
	g := e.gdescribe(tp, "g")
	for _, p := range g.Partitions {
		require.Equal(t, p.HeadOffset, p.CommittedOffset, "partition %d", p.Partition)
	}
	require.Equal(t, 1, memberStat[3].expiries)
	require.GreaterOrEqual(t, memberStat[4].expiries, 3)
	t.Logf("%d events, %d polls in %d generations (last %d), %d received again; members: %+v",
		sum, polls, len(gens), g.Generation, again, memberStat)
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
