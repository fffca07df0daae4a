package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestConsoleLists proves what the console's overview reads: queues found
// by part of their name and paged, what needs attention (dead letters
// first), and a topic's subscriptions and groups.
func TestConsoleLists(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	names := []string{e.name("alpha-1"), e.name("alpha-2"), e.name("beta-1")}
	qs := make([]store.Queue, len(names))
	for i, n := range names {
		qs[i] = e.queue(n, store.QueuePatch{})
	}
	part := e.name("alpha")
	got, more, err := store.QueueSearch(e.ctx, e.tx, store.NameSearchParams{Part: part, Limit: 1})
	require.NoError(t, err)
	require.True(t, more)
	require.Equal(t, names[0], got[0].Name)
	got, more, err = store.QueueSearch(e.ctx, e.tx, store.NameSearchParams{Part: part, After: got[0].Name, Limit: 1})
	require.NoError(t, err)
	require.False(t, more)
	require.Equal(t, names[1], got[0].Name)

	e.send(qs[2], msg(0), msg(1))
	e.deadLetter(qs[2], e.claim(qs[2], 2, 60e9), "bad")
	trouble, err := store.TroubleList(e.ctx, e.tx, 1000)
	require.NoError(t, err)
	found := false
	for _, tr := range trouble {
		if tr.Name == names[2] {
			found = true
			require.Equal(t, int64(2), tr.DeadLetters)
		}
		require.NotEqual(t, names[0], tr.Name, "a queue without trouble is not listed")
	}
	require.True(t, found)

	subs, groups, err := store.TopicChildList(e.ctx, e.tx, []int64{-1})
	require.NoError(t, err)
	require.Empty(t, subs)
	require.Empty(t, groups)
}
