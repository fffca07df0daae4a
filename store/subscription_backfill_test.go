package store_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// An unordered subscription created with a start backfills after its
// creation commits, in windows of offsets: with more events than one
// window, publishes running meanwhile, every retained event from start and
// every later one arrive exactly once, and claims take them in publish
// order.
func TestBackfillInWindowsWhilePublishing(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	keys := keysFor(2)
	const before = 11_000 // more than two windows per partition
	publishBacklog(e, tp, keys, before)

	// Publishers run while the subscription is created and backfills.
	var (
		mu    sync.Mutex
		later []string
	)
	stop := publishing(t, 2, func(w, i int) error {
		id := fmt.Sprintf("new-%d-%05d", w, i)
		_, _, err := store.EventPublish(e.ctx, e.pool, tp, []store.PublishEvent{eventWithKey(id, keys[i%2])})
		if err == nil {
			mu.Lock()
			later = append(later, id)
			mu.Unlock()
		}
		return err
	})
	time.Sleep(20 * time.Millisecond) // let some publishes land before the creation (not a synchronisation)
	s, created, n, err := store.SubscriptionUpsert(e.ctx, e.pool, tp, "all", store.SubscriptionPatch{Start: store.StartPosition{Earliest: true}})
	require.NoError(t, err)
	require.True(t, created)
	stop()
	require.GreaterOrEqual(t, n, int64(before), "at least the events published before the publishers started")

	// Every event of the log, exactly once.
	var total, distinct int64
	require.NoError(t, e.pool.QueryRow(e.ctx, `
		SELECT count(*), count(DISTINCT (event_partition, event_offset)) FROM ferry.messages WHERE queue_id = $1`, s.ID).Scan(&total, &distinct))
	var logged int64
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID).Scan(&logged))
	require.Equal(t, logged, total, "every event of the log is delivered")
	require.Equal(t, total, distinct, "none twice")
	require.EqualValues(t, before+len(later), logged)

	// Claims come in publish order, whatever order the windows ran in:
	// the first claimed are from the first batch published, and each
	// partition's in offset order.
	got := e.claim(s.Queue, 100, time.Minute)
	require.Len(t, got, 100)
	var body struct {
		Partition int   `json:"partition"`
		Offset    int64 `json:"offset"`
	}
	last := map[int]int64{0: -1, 1: -1}
	for i, m := range got {
		require.Less(t, *m.EventID, "old-01000", "claim %d is from the first batch", i)
		require.NoError(t, json.Unmarshal(m.Body, &body))
		require.Greater(t, body.Offset, last[body.Partition], "claim %d: partition %d in offset order", i, body.Partition)
		last[body.Partition] = body.Offset
	}
}

// publishBacklog publishes n events, old-00000 on, keyed by keys in turn,
// in publishes of 1,000.
func publishBacklog(e *env, tp store.Topic, keys []string, n int) {
	e.t.Helper()
	for b := range n / 1000 {
		batch := make([]store.PublishEvent, 1000)
		for i := range batch {
			n := b*1000 + i
			batch[i] = eventWithKey(fmt.Sprintf("old-%05d", n), keys[n%2])
		}
		e.publish(tp, batch...)
	}
}

// publishing runs workers goroutines, worker w calling publish(w, i) for
// i = 0, 1, ... until stop is called or a publish fails (failing the
// test); stop returns once they have all ended.
func publishing(t *testing.T, workers int, publish func(w, i int) error) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := publish(w, i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	return func() {
		close(done)
		wg.Wait()
	}
}
