package store

import (
	"sync"
)

// filterCache keeps parsed filters by their stored JSON, so a publish does
// not parse and compile every subscription's filter again. It forgets
// everything when it grows past filterCacheMax (filters change rarely).
// A Publisher owns one; its zero value is ready, and a nil one parses
// every filter it is given.
type filterCache struct {
	mu sync.Mutex
	m  map[string]*Filter
}

const filterCacheMax = 10000

// get returns the parsed form of a stored filter (nil: empty), as
// storedFilter does.
func (c *filterCache) get(stored *string) *Filter {
	if c == nil || stored == nil {
		return storedFilter(stored)
	}
	c.mu.Lock()
	f, ok := c.m[*stored]
	c.mu.Unlock()
	if ok {
		return f
	}
	f = storedFilter(stored)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= filterCacheMax {
		c.m = map[string]*Filter{}
	}
	c.m[*stored] = f
	c.mu.Unlock()
	return f
}
