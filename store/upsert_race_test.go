package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgtest"
	"github.com/ferry-mq/ferry/store"
)

// Two PUTs creating the same resource at once: neither's fields are lost
// (the one that loses the insert runs again as an update), and a topic never
// ends up with fewer partitions than a PUT asked for.
func TestUpsertCreationRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for round := range 10 {
		name := "race-" + string(rune('a'+round))
		eight, sixty, ten := 8, 60, 10
		var wg sync.WaitGroup
		wg.Add(4)
		go func() {
			defer wg.Done()
			_, _, err := store.TopicUpsert(ctx, pool, name, store.TopicPatch{Partitions: &eight})
			require.NoError(t, err)
		}()
		go func() {
			defer wg.Done()
			_, _, err := store.TopicUpsert(ctx, pool, name, store.TopicPatch{RetentionSeconds: &sixty})
			require.NoError(t, err)
		}()
		go func() {
			defer wg.Done()
			_, _, err := store.QueueUpsert(ctx, pool, name, store.QueuePatch{MaxReceives: &ten})
			require.NoError(t, err)
		}()
		go func() {
			defer wg.Done()
			_, _, err := store.QueueUpsert(ctx, pool, name, store.QueuePatch{RetentionSeconds: &sixty})
			require.NoError(t, err)
		}()
		wg.Wait()

		topic, err := store.TopicGet(ctx, pool, name)
		require.NoError(t, err)
		require.Equal(t, 8, topic.Partitions, "round %d", round)
		require.Equal(t, 60, topic.RetentionSeconds, "round %d", round)
		q, err := store.QueueGet(ctx, pool, name)
		require.NoError(t, err)
		require.Equal(t, 10, q.MaxReceives, "round %d", round)
		require.Equal(t, 60, q.RetentionSeconds, "round %d", round)
	}
}
