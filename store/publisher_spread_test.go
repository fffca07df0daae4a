package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

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
