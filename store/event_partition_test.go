package store_test

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

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

// A Publisher spreads keyless events round-robin per topic, in turn over
// the partitions, and the turn is its own: another Publisher, a publish
// without one (EventPublish), or another test whose database has a topic
// of the same id, do not move it.
func TestPublisherSpread(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "spread", 4)
	newPublisher := func() *store.Publisher {
		p := store.NewPublisher(e.pool, store.PublisherConfig{})
		t.Cleanup(p.Close)
		return p
	}
	partitions := func(p *store.Publisher, n int) []int {
		t.Helper()
		batch := make([]store.PublishEvent, n)
		for i := range batch {
			batch[i] = event("t")
		}
		res, err := p.Publish(e.ctx, tp, batch)
		require.NoError(t, err)
		out := make([]int, n)
		for i, r := range res {
			out[i] = r.Partition
		}
		return out
	}
	p := newPublisher()
	var got []int
	for range 7 {
		got = append(got, partitions(p, 1)...)
	}
	require.Equal(t, []int{1, 2, 3, 0, 1, 2, 3}, got, "one keyless event at a time")
	require.Equal(t, []int{0, 1, 2}, partitions(p, 3), "a batch continues the turn")

	require.Equal(t, []int{1, 2}, partitions(newPublisher(), 2), "another Publisher has its own turn")
	e.publish(tp, event("t"), event("t"))
	require.Equal(t, []int{3}, partitions(p, 1), "and so has EventPublish")
}
