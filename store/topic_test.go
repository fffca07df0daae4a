package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
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

// Keys pick partitions by FNV-1a 32 (the contract's formula); keyless
// events spread over every partition.
func TestEventKeys(t *testing.T) {
	t.Parallel()

	t.Run("FNV1a", func(t *testing.T) {
		t.Parallel()
		// Published FNV-1a 32 vectors, and the two of openapi.yaml.
		vectors := map[string]uint32{"": 0x811c9dc5, "a": 0xe40c292c, "foobar": 0xbf9cf968, "ORD-9912": 1181397518}
		for key, want := range vectors {
			h := fnv.New32a()
			_, _ = h.Write([]byte(key))
			require.Equal(t, want, h.Sum32(), "fnv1a32(%q)", key)
			for _, n := range []int{1, 2, 3, 4, 7, 16, 256} {
				require.Equal(t, int(want%uint32(n)), store.PartitionForKey(key, n), "key %q over %d", key, n)
			}
		}
		require.Equal(t, 0, store.PartitionForKey("a", 4), "openapi.yaml's example")
		require.Equal(t, 2, store.PartitionForKey("ORD-9912", 4), "openapi.yaml's example")
		rng := rand.New(rand.NewPCG(1, 2))
		for range 1000 {
			b := make([]byte, rng.IntN(40))
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			key := string(b) + "é€"
			h := fnv.New32a()
			_, _ = h.Write([]byte(key))
			n := 1 + rng.IntN(256)
			require.Equal(t, int(h.Sum32()%uint32(n)), store.PartitionForKey(key, n))
		}
	})

	t.Run("SameKeySamePartition", func(t *testing.T) {
		t.Parallel()
		e := newTxEnv(t)
		tp := e.topic("k", store.TopicPatch{Partitions: ptr(8)})
		keys := []string{"ORD-9912", "a", "customer/42", "ü-key", "z"}
		var batch []store.PublishEvent
		for i := range 5 {
			for _, k := range keys {
				batch = append(batch, store.PublishEvent{Type: "t", Key: ptr(k), Data: json.RawMessage(fmt.Sprint(i))})
			}
		}
		where := map[string]int{}
		for round := range 3 {
			res := e.publish(tp, batch...)
			for i, r := range res {
				k := *batch[i].Key
				require.Equal(t, store.PartitionForKey(k, 8), r.Partition, "round %d key %s", round, k)
				if p, ok := where[k]; ok {
					require.Equal(t, p, r.Partition, "key %s changed partition", k)
				}
				where[k] = r.Partition
			}
		}
		// Per key, the events read back are in publish order.
		for _, k := range keys {
			evs, _ := e.read(store.ReadParams{Topic: tp, Partition: where[k]})
			var seq []string
			for _, ev := range evs {
				require.Equal(t, where[k], ev.Partition)
				if ev.Key != nil && *ev.Key == k {
					seq = append(seq, string(ev.Data))
				}
			}
			require.Equal(t, slices.Repeat([]string{"0", "1", "2", "3", "4"}, 3), seq, "key %s", k)
		}
	})

	t.Run("KeylessSpread", func(t *testing.T) {
		t.Parallel()
		e := newTxEnv(t)
		// EventPublish spreads each publish's keyless events from a random
		// partition, with no state shared between tests; an id no
		// parallel test uses all the same (topic ids start at 1 in every
		// test database).
		e.uniqueTopicIDs()
		tp := e.topic("spread", store.TopicPatch{Partitions: ptr(4)})
		perPartition := make([]int, 4)
		for _, size := range []int{1, 1, 1, 3, 7, 20, 40, 100, 27, 200} { // 400 events
			batch := make([]store.PublishEvent, size)
			for i := range batch {
				batch[i] = event("t")
			}
			for _, r := range e.publish(tp, batch...) {
				perPartition[r.Partition]++
			}
		}
		t.Logf("keyless events per partition: %v", perPartition)
		for p, n := range perPartition {
			require.InDelta(t, 100, n, 25, "partition %d got %d of 400 keyless events", p, n)
		}
		// One batch of keyless events alone spreads too.
		batch := make([]store.PublishEvent, 8)
		for i := range batch {
			batch[i] = event("t")
		}
		used := map[int]bool{}
		for _, r := range e.publish(tp, batch...) {
			used[r.Partition] = true
			perPartition[r.Partition]++
		}
		require.Len(t, used, 4, "8 keyless events of one batch use every partition")
		for p, o := range e.offsets(tp) {
			require.EqualValues(t, perPartition[p]-1, o.HeadOffset, "partition %d", p)
		}
	})
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

// Reads by time: from_time lands on the first event published at or after
// the time (inclusive); a time after everything reads nothing, with
// next_offset the head + 1.
func TestEventReadFromTime(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	name := e.name("tm")
	tp := e.topic(name, store.TopicPatch{Partitions: ptr(2)})
	keys := keysFor(2)
	var batch []store.PublishEvent
	for i := range 10 {
		batch = append(batch, store.PublishEvent{Type: "t", Key: ptr(keys[0]), Data: json.RawMessage(fmt.Sprint(i))})
	}
	e.publish(tp, batch...)
	// Offsets 0-4 are an hour old, a second apart.
	_, err := e.db.Exec(e.ctx, `
		UPDATE ferry.events SET published_at = now() - interval '1 hour' + "offset" * interval '1 second'
		WHERE topic_id = $1 AND partition = 0 AND "offset" < 5`, tp.ID)
	require.NoError(t, err)
	at := map[int64]time.Time{}
	rows, err := e.db.Query(e.ctx, `SELECT "offset", published_at FROM ferry.events WHERE topic_id = $1`, tp.ID)
	require.NoError(t, err)
	for rows.Next() {
		var (
			o  int64
			ts time.Time
		)
		require.NoError(t, rows.Scan(&o, &ts))
		at[o] = ts
	}
	require.NoError(t, rows.Err())
	require.Len(t, at, 10)

	from := func(ts time.Time, limit int) ([]int64, int64) {
		t.Helper()
		evs, next := e.read(store.ReadParams{Topic: tp, Partition: 0, FromTime: &ts, Limit: limit})
		return eventOffsets(evs), next
	}
	cases := []struct {
		name  string
		at    time.Time
		limit int
		want  []int64
		next  int64
	}{
		{"BeforeEverything", at[0].Add(-24 * time.Hour), 100, span(0, 9), 10},
		{"ExactlyTheFirst", at[0], 100, span(0, 9), 10},
		{"Inclusive", at[3], 100, span(3, 9), 10},
		{"JustAfter", at[3].Add(time.Microsecond), 100, span(4, 9), 10},
		{"TheBoundary", at[4].Add(30 * time.Minute), 100, span(5, 9), 10},
		{"Limited", at[3], 2, []int64{3, 4}, 5},
		{"AfterEverything", time.Now().Add(time.Hour), 100, []int64{}, 10},
	}
	for _, c := range cases {
		got, next := from(c.at, c.limit)
		require.Equal(t, c.want, got, c.name)
		require.Equal(t, c.next, next, c.name)
	}
	require.EqualValues(t, 9, e.offsets(tp)[0].HeadOffset)
	// From each event's own time: every event at or after it, which (times
	// following offsets) is a suffix of the log.
	for o := range int64(10) {
		want := []int64{}
		for q := range int64(10) {
			if !at[q].Before(at[o]) {
				want = append(want, q)
			}
		}
		got, next := from(at[o], 100)
		require.Equal(t, want, got, "from the time of offset %d", o)
		require.EqualValues(t, 10, next)
	}

	// An empty partition: from any time, nothing, next_offset 0.
	for _, ts := range []time.Time{time.Time{}, at[0], time.Now().Add(time.Hour)} {
		evs, next := e.read(store.ReadParams{Topic: tp, Partition: 1, FromTime: &ts})
		require.Empty(t, evs)
		require.Zero(t, next)
	}
}

// Invariant 6 and from_time together: published_at must follow commit
// (offset) order, so that a read from a time never skips an event published
// at or after it. The interleaving is forced: publish A (partitions 0 and
// 1) starts first and waits for partition 0, which the test holds; publish
// B (partition 1 only) starts later and commits first; then A commits. A's
// event on partition 1 has the higher offset. Reading partition 1 from A's
// published_at must return B's event too if B's published_at is not
// earlier (and B's must not be later than A's if its offset is lower).
func TestEventReadFromTimeCommitOrder(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "co", 2)
	keys := keysFor(2)
	aPool := e.newNamedPool(2, "publisher-a")

	holder := e.holdPartition(tp, 0)
	aDone := publishAsync(e.ctx, aPool, tp, eventWithKey("a0", keys[0]), eventWithKey("a1", keys[1]))
	e.activityWaitingEventually("publisher-a")
	b := e.publish(tp, eventWithKey("b1", keys[1]))[0]
	require.Equal(t, store.PublishResult{ID: "b1", Partition: 1, Offset: 0}, b, "B went first on partition 1")
	require.NoError(t, holder.Rollback(e.ctx))
	a := <-aDone
	require.NoError(t, a.err)
	require.Equal(t, store.PublishResult{ID: "a1", Partition: 1, Offset: 1}, a.res[1])

	evs, next := e.read(store.ReadParams{Topic: tp, Partition: 1})
	require.Equal(t, []int64{0, 1}, eventOffsets(evs))
	require.EqualValues(t, 2, next)
	bAt, aAt := evs[0].PublishedAt, evs[1].PublishedAt
	require.False(t, aAt.Before(bAt), "published_at follows offsets: B (offset 0) %v, A (offset 1) %v", bAt, aAt)
	for _, ts := range []time.Time{bAt, aAt} {
		got, _ := e.read(store.ReadParams{Topic: tp, Partition: 1, FromTime: &ts})
		var want []int64
		for _, ev := range evs {
			if !ev.PublishedAt.Before(ts) {
				want = append(want, ev.Offset)
			}
		}
		require.Equal(t, want, eventOffsets(got), "from_time %v returns every event at or after it", ts)
	}
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

// Long polls: a waiting read returns soon after a publish announced by
// another Notifier (the wake crosses Postgres NOTIFY); with nothing
// published it returns empty after the whole wait.
func TestEventReadLongPoll(t *testing.T) {
	t.Parallel()

	t.Run("WokenByNotify", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "lp", 1)
		other := e.topic("other", store.TopicPatch{Partitions: ptr(1)})
		e.publish(tp, event("t"), event("t")) // the wait starts at offset 2
		readerPool := e.newNamedPool(4, "reader")
		readerN := e.runNotifierWindow(readerPool, 5*time.Millisecond)
		publisherN := e.runNotifierWindow(e.pool, 5*time.Millisecond)
		e.activityEventually("reader", "LISTEN %", 1)

		out := readAsync(e.ctx, readerPool, readerN, store.ReadParams{
			Topic: tp, FromOffset: 2, Limit: 10, Wait: 5 * time.Second, FallbackPoll: 10 * time.Second,
		})
		// The read looked once, found nothing and waits.
		e.activityEventually("reader", `%"offset" >= $3%`, 1)

		// Another topic's publish does not answer this read.
		e.publish(other, event("t"))
		publisherN.Published([]int64{store.TopicWakeKey(other.ID)})

		want := e.publish(tp, eventWithID("wake"))[0]
		publishedAt := time.Now()
		publisherN.Published([]int64{store.TopicWakeKey(tp.ID)})
		r := <-out
		require.NoError(t, r.err)
		require.Len(t, r.events, 1)
		require.Equal(t, "wake", r.events[0].ID)
		require.Equal(t, want.Offset, r.events[0].Offset)
		require.EqualValues(t, 3, r.next)
		require.Less(t, time.Since(publishedAt), 2*time.Second, "woken by NOTIFY, not by the 10 s fallback poll")
	})

	t.Run("EmptyAfterWait", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "lp", 2)
		e.publish(tp, eventWithKey("x", keysFor(2)[0]))
		n := e.runNotifierWindow(e.pool, 5*time.Millisecond)
		for _, from := range []int64{0, 1, 7} {
			r := <-readAsync(e.ctx, e.pool, n, store.ReadParams{
				Topic: tp, Partition: 1, FromOffset: from, Limit: 10, Wait: time.Second, FallbackPoll: 100 * time.Millisecond,
			})
			require.NoError(t, r.err)
			require.Empty(t, r.events)
			require.Equal(t, from, r.next, "next_offset is the requested position")
			require.GreaterOrEqual(t, r.elapsed, 900*time.Millisecond, "waited the whole wait")
		}
	})

	t.Run("NoWaitWhenEventsExist", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "lp", 1)
		e.publish(tp, event("t"))
		n := e.runNotifierWindow(e.pool, 5*time.Millisecond)
		r := <-readAsync(e.ctx, e.pool, n, store.ReadParams{Topic: tp, Limit: 10, Wait: 5 * time.Second, FallbackPoll: 10 * time.Second})
		require.NoError(t, r.err)
		require.Len(t, r.events, 1)
		require.Less(t, r.elapsed, 2*time.Second)
	})
}

// Retention drops exactly the events older than retention_seconds, oldest
// first, in bounded batches; oldest_offset advances, the head stays. Dedup
// ids are forgotten only after their window.
func TestEventRetention(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	name := e.name("r")
	keepName := e.name("keep")
	tp := e.topic(name, store.TopicPatch{Partitions: ptr(3), RetentionSeconds: ptr(60)})
	keep := e.topic(keepName, store.TopicPatch{Partitions: ptr(1)}) // default retention: 7 days
	keys := keysFor(3)
	for p := range 3 {
		var batch []store.PublishEvent
		for i := range 10 {
			batch = append(batch, eventWithKey(fmt.Sprintf("p%d-%d", p, i), keys[p]))
		}
		e.publish(tp, batch...)
	}
	var kbatch []store.PublishEvent
	for i := range 5 {
		kbatch = append(kbatch, eventWithID(fmt.Sprintf("k%d", i)))
	}
	e.publish(keep, kbatch...)

	backdate := func(topicID int64, partition int, below int64, age string) {
		t.Helper()
		_, err := e.db.Exec(e.ctx, `UPDATE ferry.events SET published_at = now() - $4::interval + "offset" * interval '1 millisecond'
			WHERE topic_id = $1 AND partition = $2 AND "offset" < $3`, topicID, partition, below, age)
		require.NoError(t, err)
	}
	backdate(tp.ID, 0, 4, "61 seconds")  // partition 0: offsets 0-3 expired
	backdate(tp.ID, 1, 10, "61 seconds") // partition 1: all expired
	backdate(tp.ID, 2, 3, "45 seconds")  // partition 2: old, but within retention
	backdate(keep.ID, 0, 5, "2 hours")   // another topic, within its retention

	expire := func(limit int) int64 {
		t.Helper()
		n, err := store.EventExpire(e.ctx, e.db, limit)
		require.NoError(t, err)
		return n
	}
	// Bounded: at most 3 per partition per call, oldest first.
	require.EqualValues(t, 3+3, expire(3))
	offs := e.offsets(tp)
	require.Equal(t, store.PartitionOffsets{Partition: 0, HeadOffset: 9, OldestOffset: 3}, offs[0])
	require.Equal(t, store.PartitionOffsets{Partition: 1, HeadOffset: 9, OldestOffset: 3}, offs[1])
	require.EqualValues(t, 1+7, expire(1000))
	require.Zero(t, expire(1000))

	offs = e.offsets(tp)
	require.Equal(t, []store.PartitionOffsets{
		{Partition: 0, HeadOffset: 9, OldestOffset: 4},
		{Partition: 1, HeadOffset: 9, OldestOffset: 10}, // nothing retained: head + 1
		{Partition: 2, HeadOffset: 9, OldestOffset: 0},
	}, offs)
	require.Equal(t, []store.PartitionOffsets{{Partition: 0, HeadOffset: 4, OldestOffset: 0}}, e.offsets(keep))
	require.EqualValues(t, 6+0+10, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1 AND published_at < now() - interval '60 seconds'`, tp.ID))

	// Reads from below the oldest offset start at the oldest retained.
	evs, next := e.read(store.ReadParams{Topic: tp, Partition: 0, FromOffset: 0})
	require.Equal(t, span(4, 9), eventOffsets(evs))
	require.EqualValues(t, 10, next)
	evs, next = e.read(store.ReadParams{Topic: tp, Partition: 1, FromOffset: 10})
	require.Empty(t, evs)
	require.EqualValues(t, 10, next)
	// Publishing on continues the offsets.
	r := e.publish(tp, eventWithKey("after", keys[1]))[0]
	require.EqualValues(t, 10, r.Offset)
	require.Equal(t, store.PartitionOffsets{Partition: 1, HeadOffset: 10, OldestOffset: 10}, e.offsets(tp)[1])

	// Dedup ids: only those past their window are forgotten; retention of
	// events does not forget ids still in their window.
	dupe := e.publish(tp, eventWithKey("p1-2", keys[1]))[0]
	require.True(t, dupe.Duplicate, "an id within its window stays a duplicate after its event expired")
	_, err := e.db.Exec(e.ctx, `UPDATE ferry.event_dedup SET expires_at = now() - interval '1 second'
		WHERE topic_id = $1 AND event_id IN ('p0-0', 'p0-1', 'p2-5')`, tp.ID)
	require.NoError(t, err)
	before := e.count(`SELECT count(*) FROM ferry.event_dedup`)
	n, err := store.EventDedupExpire(e.ctx, e.db, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	require.Equal(t, before-3, e.count(`SELECT count(*) FROM ferry.event_dedup`))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.event_dedup WHERE event_id IN ('p0-0', 'p0-1', 'p2-5')`))
	n, err = store.EventDedupExpire(e.ctx, e.db, 1000)
	require.NoError(t, err)
	require.Zero(t, n)
	// A forgotten id is new again; a remembered one is not.
	require.False(t, e.publish(tp, eventWithKey("p2-5", keys[2]))[0].Duplicate)
	require.True(t, e.publish(tp, eventWithKey("p2-6", keys[2]))[0].Duplicate)
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

// Events read back carry what was published.
func TestEventRoundTrip(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	name := e.name("rt")
	tp := e.topic(name, store.TopicPatch{Partitions: ptr(1)})
	before := time.Now()
	e.publish(tp,
		store.PublishEvent{ID: "full", Type: "order.created", Key: ptr("ORD-1"), Data: json.RawMessage(`{"b": [1, 2], "a": "x"}`), Attributes: json.RawMessage(`{"region":"eu"}`)},
		store.PublishEvent{ID: "bare", Type: "ping"},
		store.PublishEvent{ID: "scalar", Type: "n", Data: json.RawMessage(`42`)},
	)
	evs, next := e.read(store.ReadParams{Topic: tp})
	require.EqualValues(t, 3, next)
	require.Len(t, evs, 3)
	require.Equal(t, "full", evs[0].ID)
	require.Equal(t, "order.created", evs[0].Type)
	require.Equal(t, ptr("ORD-1"), evs[0].Key)
	require.JSONEq(t, `{"a":"x","b":[1,2]}`, string(evs[0].Data))
	require.JSONEq(t, `{"region":"eu"}`, string(evs[0].Attributes))
	require.Nil(t, evs[1].Key)
	require.Nil(t, evs[1].Data)
	require.Nil(t, evs[1].Attributes)
	require.JSONEq(t, `42`, string(evs[2].Data))
	for _, ev := range evs {
		require.WithinDuration(t, before, ev.PublishedAt, time.Minute)
	}
	// Limit pages through in order.
	evs, next = e.read(store.ReadParams{Topic: tp, FromOffset: 1, Limit: 1})
	require.Equal(t, []int64{1}, eventOffsets(evs))
	require.EqualValues(t, 2, next)
	evs, next = e.read(store.ReadParams{Topic: tp, FromOffset: 3})
	require.Empty(t, evs)
	require.EqualValues(t, 3, next)
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
