package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/store"
)

// What a committed upsert asks to wake: push workers and a kick only when
// the PUT gave push settings (a kick only when push is on and enabled),
// and a subscription's long polls only when its creation backfilled.
func TestUpsertWakes(t *testing.T) {
	t.Parallel()
	url := "https://example.com/hook"
	pushed := store.Queue{ID: 7, Push: &store.PushConfig{URL: url}}
	disabled := pushed
	disabled.DisabledAt = ptr(time.Now())
	set := &store.PushPatch{URL: &url}
	for _, c := range []struct {
		name  string
		patch store.QueuePatch
		q     store.Queue
		want  store.UpsertWakes
	}{
		{"no push given", store.QueuePatch{MaxReceives: ptr(3)}, pushed, store.UpsertWakes{}},
		{"push set", store.QueuePatch{Push: set}, pushed, store.UpsertWakes{PushChanged: true, PushKick: true}},
		{"push set, disabled", store.QueuePatch{Push: set}, disabled, store.UpsertWakes{PushChanged: true}},
		{"push removed", store.QueuePatch{Push: &store.PushPatch{Remove: true}}, store.Queue{ID: 7}, store.UpsertWakes{PushChanged: true}},
	} {
		require.Equal(t, c.want, c.patch.Wakes(c.q), c.name)
	}

	sub := store.Subscription{Queue: store.Queue{ID: 8}}
	require.Equal(t, store.UpsertWakes{Claimable: true}, store.SubscriptionPatch{}.Wakes(sub, true, 3), "created with a backfill")
	require.Equal(t, store.UpsertWakes{}, store.SubscriptionPatch{}.Wakes(sub, true, 0), "created, nothing backfilled")
	require.Equal(t, store.UpsertWakes{}, store.SubscriptionPatch{}.Wakes(sub, false, 3), "not created")
	sub.Push = &store.PushConfig{URL: url}
	require.Equal(t, store.UpsertWakes{PushChanged: true, PushKick: true, Claimable: true},
		store.SubscriptionPatch{Queue: store.QueuePatch{Push: set}}.Wakes(sub, true, 1), "push and a backfill")
}

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
		// Two PUTs of a topic and two of a queue of the same name, at once.
		topics := []store.TopicPatch{{Partitions: &eight}, {RetentionSeconds: &sixty}}
		queues := []store.QueuePatch{{MaxReceives: &ten}, {RetentionSeconds: &sixty}}
		errs := make([]error, len(topics)+len(queues))
		atOnce(len(errs), func(i int) {
			if i < len(topics) {
				_, _, errs[i] = store.TopicUpsert(ctx, pool, name, topics[i])
			} else {
				_, _, errs[i] = store.QueueUpsert(ctx, pool, name, queues[i-len(topics)])
			}
		})
		for i, err := range errs {
			require.NoError(t, err, "round %d, PUT %d", round, i)
		}

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
