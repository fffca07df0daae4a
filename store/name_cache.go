package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NameCache remembers resources (queues, topics) by name for a short time,
// so hot paths (send, receive, ack, publish) do not read the resource's row
// on every request. A change made through another instance is seen within
// the TTL; this instance's own changes are seen at once (Forget).
type NameCache[T any] struct {
	ttl  time.Duration
	load func(ctx context.Context, db DBTX, name string) (T, error)
	mu   sync.Mutex
	m    map[string]cached[T]
}

type cached[T any] struct {
	v  T
	at time.Time
}

// QueueCache caches queues by name.
type QueueCache = NameCache[Queue]

// TopicCache caches topics by name.
type TopicCache = NameCache[Topic]

// NewQueueCache makes a queue cache whose entries live for ttl.
func NewQueueCache(ttl time.Duration) *QueueCache {
	return &QueueCache{ttl: ttl, load: QueueGet, m: map[string]cached[Queue]{}}
}

// NewTopicCache makes a topic cache whose entries live for ttl.
func NewTopicCache(ttl time.Duration) *TopicCache {
	return &TopicCache{ttl: ttl, load: TopicGet, m: map[string]cached[Topic]{}}
}

// Get returns the named resource, from the cache when fresh.
func (c *NameCache[T]) Get(ctx context.Context, db DBTX, name string) (T, error) {
	c.mu.Lock()
	e, ok := c.m[name]
	c.mu.Unlock()
	if ok && time.Since(e.at) < c.ttl {
		return e.v, nil
	}
	v, err := c.load(ctx, db, name)
	if err != nil {
		var zero T
		return zero, err
	}
	c.mu.Lock()
	if len(c.m) > 10000 {
		clear(c.m)
	}
	c.m[name] = cached[T]{v: v, at: time.Now()}
	c.mu.Unlock()
	return v, nil
}

// With runs fn with the named resource from the cache. A cached resource
// may be stale (deleted and created again, or changed, through another
// instance): when fn reports [ErrNotFound] or stale, the resource is
// forgotten, read afresh, and fn runs once more with it.
func (c *NameCache[T]) With(ctx context.Context, db DBTX, name string, fn func(v T) (stale bool, err error)) error {
	v, err := c.Get(ctx, db, name)
	if err != nil {
		return err
	}
	stale, err := fn(v)
	if !stale && !errors.Is(err, ErrNotFound) {
		return err
	}
	c.Forget(name)
	if v, err = c.Get(ctx, db, name); err != nil {
		return err
	}
	_, err = fn(v)
	return err
}

// Forget drops the named resource from the cache.
func (c *NameCache[T]) Forget(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}

// SubscriptionCache caches subscriptions by [SubscriptionKey].
type SubscriptionCache = NameCache[Subscription]

// SubscriptionKey names a subscription in a [SubscriptionCache].
func SubscriptionKey(topicID int64, name string) string {
	return strconv.FormatInt(topicID, 10) + "/" + name
}

// NewSubscriptionCache makes a subscription cache whose entries live for ttl.
func NewSubscriptionCache(ttl time.Duration) *SubscriptionCache {
	load := func(ctx context.Context, db DBTX, key string) (Subscription, error) {
		id, name, _ := strings.Cut(key, "/")
		topicID, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return Subscription{}, fmt.Errorf("subscription cache: bad key %q", key)
		}
		return SubscriptionGet(ctx, db, topicID, name)
	}
	return &SubscriptionCache{ttl: ttl, load: load, m: map[string]cached[Subscription]{}}
}
