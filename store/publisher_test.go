package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/store"
)

// Concurrent single-event publishes through the Publisher share
// transactions, get dense offsets, and one request's failure does not fail
// the others it was merged with.
func TestPublisherGroupCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	one := 1
	topic, _, err := store.TopicUpsert(ctx, pool, "pub", store.TopicPatch{Partitions: &one})
	require.NoError(t, err)

	var (
		mu        sync.Mutex
		committed []int64
	)
	p := store.NewPublisher(pool, store.PublisherConfig{Workers: 2, Published: func(ids, _ []int64) {
		mu.Lock()
		committed = append(committed, ids...)
		mu.Unlock()
	}})
	defer p.Close()

	const n = 64
	var (
		wg      sync.WaitGroup
		offsets = make([]int64, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			ev := store.PublishEvent{ID: fmt.Sprintf("e%d", i), Type: "t", Data: json.RawMessage(`{"i":1}`)}
			if i%16 == 0 {
				// PostgreSQL's jsonb refuses this: the request must fail
				// alone, not with the others in its transaction.
				ev.Data = json.RawMessage(`{"bad":"\u0000"}`)
			}
			res, err := p.Publish(ctx, topic, []store.PublishEvent{ev})
			errs[i] = err
			if err == nil {
				offsets[i] = res[0].Offset
			}
		})
	}
	wg.Wait()

	var got []int64
	for i := range n {
		if i%16 == 0 {
			require.Error(t, errs[i], "request %d", i)
			continue
		}
		require.NoError(t, errs[i], "request %d", i)
		got = append(got, offsets[i])
	}
	slices.Sort(got)
	for i, o := range got {
		require.EqualValues(t, i, o, "offsets are dense and unique")
	}
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, topic.ID).Scan(&rows))
	require.Equal(t, len(got), rows, "failed requests wrote nothing")
	mu.Lock()
	require.Contains(t, committed, topic.ID)
	mu.Unlock()

	// A deleted topic: not found, nothing written.
	_, err = p.Publish(ctx, store.Topic{ID: topic.ID + 1000, TopicConfig: topic.TopicConfig},
		[]store.PublishEvent{{Type: "t"}})
	require.True(t, errors.Is(err, store.ErrNotFound), "got %v", err)
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
