package store

import (
	"context"
	"time"
)

// SetMissLimits changes how long (ttl) and how many (limit) secrets no
// key has the cache remembers, and forgets those it remembers: for tests
// that cannot wait KeyMissTTL or make KeyMissLimit lookups.
func (c *KeyCache[T]) SetMissLimits(ttl time.Duration, limit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.missTTL, c.missLimit = ttl, limit
	c.missing.clear()
}

// Missing is how many secrets no key has the cache remembers.
func (c *KeyCache[T]) Missing() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.missing.len()
}

// KeyCreateWithSecret is KeyCreate with the caller's secret, so that a
// test can present a key's secret before the key exists.
func KeyCreateWithSecret(ctx context.Context, db DBTX, h *KeyHasher, p KeyCreateParams, secret string) (APIKey, error) {
	return keyCreate(ctx, db, h, p, secret)
}
