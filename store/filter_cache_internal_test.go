package store

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFilterCacheOwned: parsed filters are kept by the cache that parsed
// them (a Publisher's), not shared by every cache in the process; a nil
// cache parses every time, and a full one starts again.
func TestFilterCacheOwned(t *testing.T) {
	t.Parallel()
	stored := `{"types":["order.*"]}`
	var a, b filterCache
	fa := a.get(&stored)
	require.True(t, fa.matchType("order.created"))
	require.Same(t, fa, a.get(&stored), "a cache keeps what it parsed")
	require.NotSame(t, fa, b.get(&stored), "another cache parses its own")

	var none *filterCache
	require.NotSame(t, none.get(&stored), none.get(&stored), "a nil cache keeps nothing")
	require.True(t, none.get(&stored).matchType("order.created"))
	require.Empty(t, none.get(nil).Types, "no stored filter: the empty filter")

	for i := len(a.m); i < filterCacheMax; i++ {
		s := strconv.Itoa(i)
		a.get(&s)
	}
	require.Len(t, a.m, filterCacheMax)
	other := `{"types":["x"]}`
	a.get(&other)
	require.Len(t, a.m, 1, "a full cache forgets everything first")
	require.NotSame(t, fa, a.get(&stored))
}
