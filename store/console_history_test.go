package store_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestSamplesWrite proves the console's history: a sample reads the
// engine's own counters, so sends, acks and dead letters through the SQL
// API in an application's transaction show as well as the store's
// (REST's) own; a sample is written only where something changed, and a
// run that finds nothing changed writes nothing at all (no transaction id
// is even taken: DESIGN.md invariant 12); two instances sampling one
// minute make one row with the later reading; a deleted queue's samples
// go with it.
func TestSamplesWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("hist", store.QueuePatch{MaxReceives: ptr(5)})
	tp := e.topic("hist-topic", store.TopicPatch{Partitions: ptr(2)})
	base := time.Now().Add(-30 * time.Minute).Truncate(time.Minute)
	sample := func(minute int) {
		t.Helper()
		require.NoError(t, store.SamplesWrite(e.ctx, e.pool, base.Add(time.Duration(minute)*time.Minute)))
	}
	rows := func(table string) int64 { return e.count(`SELECT count(*) FROM ferry.` + table) }

	sample(0)
	require.Zero(t, rows("queue_samples")+rows("topic_samples")+rows("group_samples"), "nothing has counters yet")

	// Store (REST) traffic: 3 sent, 1 acked, 1 dead-lettered.
	e.send(q, msg(0), msg(1), msg(2))
	got := e.claim(q, 2, time.Minute)
	require.Equal(t, []bool{true}, e.ack(q, receipts(got[:1])...))
	e.deadLetter(q, got[1:], "bad")
	// SQL API traffic in an application's transaction: 2 sent, 1 acked.
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(e.ctx, `SELECT ferry.send($1, '{"n": 1}'), ferry.send($1, '{"n": 2}')`, q.Name)
		return err
	}))
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(e.ctx, `SELECT ferry.ack($1, array_agg(receipt)) FROM ferry.receive($1, 1, 60)`, q.Name)
		return err
	}))
	e.publishTo(tp, 0, 2)
	e.publishTo(tp, 1, 3)
	sample(1)
	list := func() []store.QueueSample {
		s, err := store.QueueSampleList(e.ctx, e.pool, "", q.Name, time.Hour)
		require.NoError(t, err)
		return s
	}
	first := list()
	require.Len(t, first, 1)
	require.Equal(t, store.QueueSample{Minute: base.Add(time.Minute), Depth: 2, DeadLetters: 1, Added: 5, DeadLettered: 1, Totals: true}, first[0])
	published, err := store.TopicSampleList(e.ctx, e.pool, tp.Name, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []store.Sample{{Minute: base, Value: 0}, {Minute: base.Add(time.Minute), Value: 5}}, published,
		"a topic made within the hour counts from zero")

	// Nothing changed: a run writes nothing, and takes no transaction id.
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		require.NoError(t, store.SamplesWrite(e.ctx, tx, base.Add(2*time.Minute)))
		var xid *string
		require.NoError(t, tx.QueryRow(e.ctx, `SELECT pg_current_xact_id_if_assigned()::text`).Scan(&xid))
		require.Nil(t, xid, "an idle sample writes nothing")
		return nil
	}))
	require.Len(t, list(), 1)

	// A consumer group with lag; two instances sampling one minute.
	e.gpollStart(tp, "g", "c1", store.StartPosition{Earliest: true}, 1)
	e.send(q, msg(3))
	sample(3)
	e.send(q, msg(4))
	sample(3)
	got3 := list()
	require.Len(t, got3, 2)
	require.Equal(t, int64(7), got3[1].Added, "the later reading of the minute")
	require.Equal(t, int64(4), got3[1].Depth)
	lag, err := store.GroupSampleList(e.ctx, e.pool, tp.Name, "g", time.Hour)
	require.NoError(t, err)
	require.Equal(t, []store.Sample{{Minute: base.Add(3 * time.Minute), Value: 5}}, lag)

	// The base before the window comes first.
	before, err := store.QueueSampleList(e.ctx, e.pool, "", q.Name, time.Since(base.Add(2*time.Minute)))
	require.NoError(t, err)
	require.Len(t, before, 2, "the sample of minute 3, after the one of minute 1 as its base")
	require.Equal(t, base.Add(time.Minute), before[0].Minute)

	_, err = e.pool.Exec(e.ctx, `DELETE FROM ferry.queues WHERE id = $1`, q.ID)
	require.NoError(t, err)
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.queue_samples WHERE queue_id = $1`, q.ID))
}

// TestSamplesKeepTheirHistory proves that samples older than
// SampleHistory go when their target is sampled again, all but the newest
// of them (the base of the next), and that a target that has not changed
// keeps its last sample however old (a target at rest is not written
// again).
func TestSamplesKeepTheirHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("kept", store.QueuePatch{})
	old := time.Now().Add(-3 * store.SampleHistory).Truncate(time.Minute)
	minutes := func() []time.Time {
		var ms []time.Time
		rows, err := e.pool.Query(e.ctx, `SELECT minute FROM ferry.queue_samples WHERE queue_id = $1 ORDER BY minute`, q.ID)
		require.NoError(t, err)
		ms, err = pgx.CollectRows(rows, pgx.RowTo[time.Time])
		require.NoError(t, err)
		return ms
	}
	for i := range 3 {
		e.send(q, msg(i))
		require.NoError(t, store.SamplesWrite(e.ctx, e.pool, old.Add(time.Duration(i)*time.Minute)))
	}
	require.NoError(t, store.SamplesWrite(e.ctx, e.pool, time.Time{}))
	require.Len(t, minutes(), 3, "unchanged: nothing written, nothing removed")
	e.send(q, msg(3))
	require.NoError(t, store.SamplesWrite(e.ctx, e.pool, time.Time{}))
	got := minutes()
	require.Len(t, got, 2, "the older two went")
	require.Equal(t, old.Add(2*time.Minute), got[0], "the newest old one stays, the base of the new one")
}

// TestSamplesWriteConcurrentInstances proves that instances sampling at
// once while traffic goes on (each a pool of its own, as each instance
// has) neither fail nor count twice: the newest sample holds exactly what
// was sent, one row a minute.
func TestSamplesWriteConcurrentInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("shared", store.QueuePatch{})
	const instances, rounds = 4, 15
	done := make(chan struct{})
	errs := make(chan error, instances)
	for range instances {
		pool := e.newPool(2)
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if err := store.SamplesWrite(e.ctx, pool, time.Time{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range rounds {
		e.send(q, msg(i), msg(i+1))
	}
	close(done)
	for range instances {
		require.NoError(t, <-errs)
	}
	require.NoError(t, store.SamplesWrite(e.ctx, e.pool, time.Time{}))
	s, err := store.QueueSampleList(e.ctx, e.pool, "", q.Name, time.Hour)
	require.NoError(t, err)
	require.NotEmpty(t, s)
	last := s[len(s)-1]
	require.Equal(t, int64(2*rounds), last.Added, "sent once, counted once")
	require.Equal(t, int64(2*rounds), last.Depth)
	require.LessOrEqual(t, len(s), 2, "a row a minute (two if the test crossed one)")
}
