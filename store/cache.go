package store

import (
	"context"
	"sync"
	"time"
)

// QueueCache remembers queues by name for a short time, so the hot paths
// (receive, ack, nack, extend) do not read the queue row on every request.
// A configuration change reaches other instances within the TTL; this
// instance's own changes are seen at once (Forget).
type QueueCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]cachedQueue
}

type cachedQueue struct {
	q  Queue
	at time.Time
}

// NewQueueCache makes a cache whose entries live for ttl.
func NewQueueCache(ttl time.Duration) *QueueCache {
	return &QueueCache{ttl: ttl, m: map[string]cachedQueue{}}
}

// Get returns the named queue, from the cache when fresh.
func (c *QueueCache) Get(ctx context.Context, db DBTX, name string) (Queue, error) {
	c.mu.Lock()
	e, ok := c.m[name]
	c.mu.Unlock()
	if ok && time.Since(e.at) < c.ttl {
		return e.q, nil
	}
	q, err := QueueGet(ctx, db, name)
	if err != nil {
		return Queue{}, err
	}
	c.mu.Lock()
	if len(c.m) > 10000 {
		clear(c.m)
	}
	c.m[name] = cachedQueue{q: q, at: time.Now()}
	c.mu.Unlock()
	return q, nil
}

// Forget drops the named queue from the cache.
func (c *QueueCache) Forget(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}
