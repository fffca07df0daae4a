package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	grouped := []string{"topic_partitions_lock", "topic_subscriptions_check", "event_group_locks",
		"ring_planner_publish", "event_append", "ring_planner_publish_end"}
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

// Invariant 6: offsets are dense per partition, start at 0, and become
// visible in offset order. Eight publishers race (batches of 1-20 events,
// keyed and keyless, some ids repeated across publishers) while one tail
// reader per partition reads on from its next_offset: it must see 0, 1, 2,
// ... with no gap ever (an event committing later at a lower offset would
// show as a gap now and an offset below the cursor later). At the end every
// acknowledged event was read exactly once where its answer said.
func TestEventOffsetsDenseUnderConcurrentPublishes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		partitions int
		publisher  bool // through store.Publisher (group commit), as the HTTP API does
	}{
		{"OnePartition", 1, false},
		{"FourPartitions", 4, false},
		{"FourPartitionsPublisher", 4, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tp := e.topic("log", store.TopicPatch{Partitions: ptr(tc.partitions)})
			publish := func(evs []store.PublishEvent) ([]store.PublishResult, error) {
				res, _, err := store.EventPublish(e.ctx, e.pool, tp, evs)
				return res, err
			}
			if tc.publisher {
				p := store.NewPublisher(e.pool, store.PublisherConfig{})
				t.Cleanup(p.Close)
				publish = func(evs []store.PublishEvent) ([]store.PublishResult, error) {
					return p.Publish(e.ctx, tp, evs)
				}
			}
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)

			const (
				publishers = 8
				maxEvents  = 3000
				maxTime    = 2 * time.Second
			)
			type sent struct {
				events  []store.PublishEvent
				results []store.PublishResult
			}
			var (
				total     atomic.Int64
				pubWG     sync.WaitGroup
				pubMu     sync.Mutex
				batches   []sent
				pubErrs   []error
				startLine = make(chan struct{})
				deadline  = time.Now().Add(maxTime)
			)
			for w := range publishers {
				pubWG.Go(func() {
					rng := rand.New(rand.NewPCG(seed, uint64(w)))
					<-startLine
					for seq := 0; total.Load() < maxEvents && time.Now().Before(deadline); seq++ {
						n := 1 + rng.IntN(20)
						evs := make([]store.PublishEvent, n)
						for i := range evs {
							ev := store.PublishEvent{Type: "t", Data: json.RawMessage(fmt.Sprintf(`{"w":%d,"seq":%d,"i":%d}`, w, seq, i))}
							switch rng.IntN(4) {
							case 0: // keyed, generated id
								ev.Key = ptr(fmt.Sprintf("k%d", rng.IntN(13)))
							case 1: // keyed, an id other publishers may use too
								ev.Key = ptr(fmt.Sprintf("k%d", rng.IntN(13)))
								ev.ID = fmt.Sprintf("shared-%d", rng.IntN(200))
							case 2: // keyless, own id
								ev.ID = fmt.Sprintf("w%d-%d-%d", w, seq, i)
							}
							evs[i] = ev
						}
						res, err := publish(evs)
						pubMu.Lock()
						if err != nil {
							pubErrs = append(pubErrs, err)
						} else {
							batches = append(batches, sent{evs, res})
						}
						pubMu.Unlock()
						if err != nil {
							return
						}
						total.Add(int64(n))
					}
				})
			}

			// One tail reader per partition.
			type seen struct {
				id     string
				offset int64
			}
			var (
				readWG    sync.WaitGroup
				finished  = make(chan struct{}) // closed once publishing ended and heads are known
				heads     = make([]int64, tc.partitions)
				readLogs  = make([][]seen, tc.partitions)
				readFails = make([][]string, tc.partitions)
			)
			for p := range tc.partitions {
				readWG.Go(func() {
					fail := func(format string, args ...any) {
						readFails[p] = append(readFails[p], fmt.Sprintf(format, args...))
					}
					next := int64(0)
					for {
						evs, nextOff, err := store.EventRead(e.ctx, e.pool, nil, store.ReadParams{
							Topic: tp, Partition: p, FromOffset: next, Limit: 100,
						})
						if err != nil {
							fail("read from %d: %v", next, err)
							return
						}
						for _, ev := range evs {
							if ev.Partition != p {
								fail("read partition %d, got an event of partition %d", p, ev.Partition)
								return
							}
							if ev.Offset != next {
								fail("after offset %d came offset %d (a gap, or an offset at or below one already read)", next-1, ev.Offset)
								return
							}
							readLogs[p] = append(readLogs[p], seen{ev.ID, ev.Offset})
							next++
						}
						if nextOff != next {
							fail("next_offset %d after reading up to %d", nextOff, next-1)
							return
						}
						if len(evs) > 0 {
							continue
						}
						select {
						case <-finished:
							if next > heads[p] {
								return
							}
						default:
							pause(time.Millisecond) // pacing an empty tail, not synchronisation
						}
					}
				})
			}

			close(startLine)
			pubWG.Wait()
			require.Empty(t, pubErrs, "publishes failed")
			offs := e.offsets(tp)
			require.Len(t, offs, tc.partitions)
			for p, o := range offs {
				require.Equal(t, p, o.Partition)
				heads[p] = o.HeadOffset
			}
			close(finished)
			readWG.Wait()
			for p := range tc.partitions {
				require.Empty(t, readFails[p], "tail reader of partition %d", p)
			}

			// Every acknowledged event was read exactly once, where its
			// answer said; duplicates name an event with their id.
			byPlace := map[[2]int64]string{}
			for p, log := range readLogs {
				for _, s := range log {
					byPlace[[2]int64{int64(p), s.offset}] = s.id
				}
			}
			fresh, dups := 0, 0
			owned := map[[2]int64]bool{}
			for _, b := range batches {
				require.Len(t, b.results, len(b.events))
				for i, r := range b.results {
					place := [2]int64{int64(r.Partition), r.Offset}
					id, ok := byPlace[place]
					require.True(t, ok, "answer %+v names an event no reader saw", r)
					require.Equal(t, r.ID, id, "answer %+v: the event read there has id %s", r, id)
					if b.events[i].ID != "" {
						require.Equal(t, b.events[i].ID, r.ID, "the given id is kept")
					}
					if r.Duplicate {
						dups++
						continue
					}
					fresh++
					if k := b.events[i].Key; k != nil {
						require.Equal(t, store.PartitionForKey(*k, tc.partitions), r.Partition, "key %s", *k)
					}
					require.False(t, owned[place], "two non-duplicate answers name %v", place)
					owned[place] = true
				}
			}
			require.Len(t, owned, len(byPlace), "every event read is some publish's own")
			t.Logf("%d events in %d batches (%d duplicate answers), heads %v", fresh, len(batches), dups, heads)
			require.Positive(t, dups, "the shared ids made some duplicates")

			// Dense 0..head per partition, with TopicOffsets agreeing.
			read := 0
			for p, log := range readLogs {
				require.EqualValues(t, len(log)-1, heads[p], "partition %d: head_offset is the last offset read", p)
				require.Zero(t, offs[p].OldestOffset)
				read += len(log)
			}
			require.Equal(t, fresh, read)
			require.EqualValues(t, fresh, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
			if tc.partitions > 1 {
				for p, log := range readLogs {
					require.NotEmpty(t, log, "partition %d got events", p)
				}
			}
		})
	}
}

// Invariant 4: an event id seen within the window never makes a second
// event, also when identical publishes race; a duplicate answers where the
// original landed.
func TestEventDedup(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentSameID", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		tp := e.topic("d", store.TopicPatch{})
		for round, ev := range []store.PublishEvent{
			eventWithID("same"), // keyless: each racer would pick its own partition
			eventWithKey("same-keyed", "order-1"),
		} {
			all := publishAtOnce(t, e, tp, 20, ev)
			originals := 0
			first := all[0][0]
			for _, res := range all {
				r := res[0]
				require.Equal(t, ev.ID, r.ID)
				require.Equal(t, first.Partition, r.Partition, "round %d: every answer names the same partition", round)
				require.Equal(t, first.Offset, r.Offset, "round %d: every answer names the same offset", round)
				if !r.Duplicate {
					originals++
				}
			}
			require.Equal(t, 1, originals, "round %d: exactly one answer is not a duplicate", round)
			require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1 AND id = $2`, tp.ID, ev.ID))
			require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1 AND id = $2 AND partition = $3 AND "offset" = $4`,
				tp.ID, ev.ID, first.Partition, first.Offset), "the event is where the answers say")
			require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1 AND event_id = $2`, tp.ID, ev.ID))
		}
		require.EqualValues(t, 2, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
		// No offset was burnt by the losers.
		var heads int64
		for _, o := range e.offsets(tp) {
			heads += o.HeadOffset + 1
		}
		require.EqualValues(t, 2, heads)
	})

	t.Run("ConcurrentOverlappingBatches", func(t *testing.T) {
		// Racing batches that share some ids (in different orders and
		// partitions) neither deadlock nor double-write.
		t.Parallel()
		e := newEnv(t)
		tp := e.topic("d", store.TopicPatch{})
		errs, res, batches := make([]error, 12), make([][]store.PublishResult, 12), make([][]store.PublishEvent, 12)
		for i := range batches {
			batches[i] = []store.PublishEvent{
				eventWithKey("x", fmt.Sprintf("k%d", i)), eventWithID(fmt.Sprintf("own-%d", i)),
				eventWithKey("y", fmt.Sprintf("j%d", i)), eventWithID("z"),
			}
			if i%2 == 1 {
				slices.Reverse(batches[i])
			}
		}
		atOnce(12, func(i int) {
			res[i], _, errs[i] = store.EventPublish(e.ctx, e.pool, tp, batches[i])
		})
		where := map[string][2]int64{}
		originals := map[string]int{}
		for i := range 12 {
			require.NoError(t, errs[i], "publish %d", i)
			for _, r := range res[i] {
				place := [2]int64{int64(r.Partition), r.Offset}
				if w, ok := where[r.ID]; ok {
					require.Equal(t, w, place, "id %s answered at two places", r.ID)
				}
				where[r.ID] = place
				if !r.Duplicate {
					originals[r.ID]++
				}
			}
		}
		for _, id := range []string{"x", "y", "z"} {
			require.Equal(t, 1, originals[id], "id %s", id)
		}
		require.EqualValues(t, 3+12, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
		for id, w := range where {
			require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1 AND id = $2 AND partition = $3 AND "offset" = $4`,
				tp.ID, id, w[0], w[1]), "id %s", id)
		}
	})

	t.Run("RepeatedInOneBatch", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		for _, window := range []int{300, 0} {
			tp := e.topic(fmt.Sprintf("w%d", window), store.TopicPatch{Partitions: ptr(1), DedupWindowSeconds: ptr(window)})
			res := e.publish(tp, eventWithID("a"), eventWithID("b"), eventWithID("a"), eventWithID("c"), eventWithID("a"))
			require.Equal(t, []store.PublishResult{
				{ID: "a", Partition: 0, Offset: 0},
				{ID: "b", Partition: 0, Offset: 1},
				{ID: "a", Partition: 0, Offset: 0, Duplicate: true},
				{ID: "c", Partition: 0, Offset: 2},
				{ID: "a", Partition: 0, Offset: 0, Duplicate: true},
			}, res, "window %d", window)
			require.EqualValues(t, 3, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
			require.Equal(t, int64(2), e.offsets(tp)[0].HeadOffset, "duplicates take no offset")
		}
	})

	t.Run("DuplicateAmongFreshEvents", func(t *testing.T) {
		// A batch mixing a duplicate of an earlier publish with new events:
		// the new ones get the next dense offsets, the duplicate the old one.
		t.Parallel()
		e, tp := newTopicEnv(t, "d", 1)
		e.publish(tp, eventWithID("old"), eventWithID("other"))
		res := e.publish(tp, eventWithID("n1"), eventWithID("old"), event("t"), eventWithID("n1"))
		require.Equal(t, store.PublishResult{ID: "n1", Partition: 0, Offset: 2}, res[0])
		require.Equal(t, store.PublishResult{ID: "old", Partition: 0, Offset: 0, Duplicate: true}, res[1])
		require.EqualValues(t, 3, res[2].Offset)
		require.False(t, res[2].Duplicate)
		require.NotEmpty(t, res[2].ID, "a generated id")
		require.Equal(t, store.PublishResult{ID: "n1", Partition: 0, Offset: 2, Duplicate: true}, res[3])
		evs, next := e.read(store.ReadParams{Topic: tp})
		require.Equal(t, span(0, 3), eventOffsets(evs))
		require.EqualValues(t, 4, next)
	})

	t.Run("AfterTheWindow", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// A window of 0: a later publish of the same id is a new event.
		zero := e.topic("zero", store.TopicPatch{Partitions: ptr(1), DedupWindowSeconds: ptr(0)})
		first := e.publish(zero, eventWithID("x"))[0]
		second := e.publish(zero, eventWithID("x"))[0]
		require.False(t, second.Duplicate)
		require.Equal(t, first.Offset+1, second.Offset)
		require.EqualValues(t, 2, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1 AND id = 'x'`, zero.ID))

		// A window that ran out (backdated): a new event, and from then on
		// duplicates answer the new one.
		tp := e.topic("five", store.TopicPatch{Partitions: ptr(4)})
		keys := keysFor(4)
		orig := e.publish(tp, eventWithKey("y", keys[1]))[0]
		require.Equal(t, 1, orig.Partition)
		dup := e.publish(tp, eventWithKey("y", keys[1]))[0]
		require.True(t, dup.Duplicate)
		_, err := e.pool.Exec(e.ctx, `UPDATE ferry.event_dedup SET expires_at = now() - interval '1 second' WHERE topic_id = $1 AND event_id = 'y'`, tp.ID)
		require.NoError(t, err)
		again := e.publish(tp, eventWithKey("y", keys[3]))[0]
		require.False(t, again.Duplicate, "the window ended")
		require.Equal(t, store.PublishResult{ID: "y", Partition: 3, Offset: 0}, again)
		dup = e.publish(tp, eventWithKey("y", keys[0]))[0]
		require.Equal(t, store.PublishResult{ID: "y", Partition: 3, Offset: 0, Duplicate: true}, dup, "duplicates now answer the new event")
		require.EqualValues(t, 2, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1 AND id = 'y'`, tp.ID))
		require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1 AND event_id = 'y'`, tp.ID))
	})

	t.Run("DuplicateAnswersOriginalPartition", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "d", 4)
		keys := keysFor(4)
		e.publish(tp, eventWithKey("filler", keys[2]))
		orig := e.publish(tp, eventWithKey("id-1", keys[2]))[0]
		require.Equal(t, store.PublishResult{ID: "id-1", Partition: 2, Offset: 1}, orig)
		for _, ev := range []store.PublishEvent{
			eventWithKey("id-1", keys[0]), // would hash to partition 0
			eventWithKey("id-1", keys[3]),
			eventWithID("id-1"), // keyless
		} {
			r := e.publish(tp, ev)[0]
			require.Equal(t, store.PublishResult{ID: "id-1", Partition: 2, Offset: 1, Duplicate: true}, r)
		}
		for p, o := range e.offsets(tp) {
			want := int64(-1)
			if p == 2 {
				want = 1
			}
			require.Equal(t, want, o.HeadOffset, "partition %d: duplicates append nothing anywhere", p)
		}
	})
}

// Invariant 9: a batch the database refuses writes nothing: no event, no
// dedup id, no offset consumed.
func TestEventPublishBatchAtomicity(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "atomic", 2)
	keys := keysFor(2)
	e.publish(tp, eventWithKey("a", keys[0]), eventWithKey("b", keys[1]), eventWithKey("c", keys[0]))

	bad := store.PublishEvent{ID: "bad", Type: "t", Key: ptr(keys[1]), Data: json.RawMessage(`{"s":"x\u0000y"}`)}
	for _, batch := range [][]store.PublishEvent{
		{eventWithKey("good-0", keys[0]), eventWithKey("good-1", keys[1]), bad},
		{bad, eventWithKey("good-0", keys[0])},
		{eventWithKey("a", keys[0]), bad}, // with a duplicate
	} {
		_, _, err := store.EventPublish(e.ctx, e.pool, tp, batch)
		require.Error(t, err, "PostgreSQL refuses \\u0000 in jsonb")
		require.False(t, errors.Is(err, store.ErrNotFound))
		require.EqualValues(t, 3, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
		require.EqualValues(t, 3, e.count(`SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1`, tp.ID))
		require.Equal(t, []store.PartitionOffsets{
			{Partition: 0, HeadOffset: 1, OldestOffset: 0},
			{Partition: 1, HeadOffset: 0, OldestOffset: 0},
		}, e.offsets(tp))
	}
	// The refused ids are new, and offsets go on densely.
	res := e.publish(tp, eventWithKey("good-0", keys[0]), eventWithKey("good-1", keys[1]), eventWithKey("bad", keys[1]))
	require.Equal(t, []store.PublishResult{
		{ID: "good-0", Partition: 0, Offset: 2},
		{ID: "good-1", Partition: 1, Offset: 1},
		{ID: "bad", Partition: 1, Offset: 2},
	}, res)
	for p := range 2 {
		evs, _ := e.read(store.ReadParams{Topic: tp, Partition: p})
		require.Equal(t, span(0, e.offsets(tp)[p].HeadOffset), eventOffsets(evs), "partition %d dense", p)
	}
}

// A publish locks its partitions' rows but does not update them: behind a
// held snapshot every version of a row stays, and each later publish's
// lock walked them all. The offsets still follow on, dense, from one
// publish to the next.
func TestEventPublishLeavesPartitionRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp := e.topic("rows", store.TopicPatch{Partitions: ptr(2)})
	rows := func() string {
		var s string
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT string_agg(ctid::text || '/' || xmin::text, ',' ORDER BY partition)
			FROM ferry.topic_partitions WHERE topic_id = $1`, tp.ID).Scan(&s))
		return s
	}
	before := rows()
	var offsets []int64
	for i := range 5 {
		r := e.publish(tp, store.PublishEvent{ID: fmt.Sprintf("e%d", i), Type: "t", Key: ptr("k")})
		offsets = append(offsets, r[0].Offset)
	}
	require.Equal(t, []int64{0, 1, 2, 3, 4}, offsets)
	require.Equal(t, before, rows(), "the partition rows are the versions they were")
}
