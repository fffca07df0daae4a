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
