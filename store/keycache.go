package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// KeyCache answers "which key is this secret?" from memory: a request
// costs no database read once its key has been seen. An entry lives at
// most KeyCacheTTL; every entry is dropped when any instance deletes a
// key (KeyDelete's NOTIFY of KeysWakeKey, heard through the Notifier) and
// whenever the Notifier (re)starts listening, since a delete may have
// gone unheard meanwhile; while the Notifier is not listening, the cache
// is not used at all (every request reads its key). So a deleted key is
// refused by every instance within the NOTIFY's delivery (milliseconds).
// KeyCacheTTL bounds an entry's life besides. Uses are recorded in memory and written
// by Flush (KeyTouch: at most once a minute per key).
//
// T is the key as its user needs it (internal/access parses the
// permissions once, when the key is loaded).
type KeyCache[T any] struct {
	pool   *pgxpool.Pool
	n      *Notifier
	hasher *KeyHasher
	load   func(APIKey) (T, error)
	ttl    time.Duration

	mu      sync.Mutex
	entries map[string]keyEntry[T] // by hash
	used    map[int64]bool
	gen     uint64 // bumped by Forget: a load begun before it is not kept
}

type keyEntry[T any] struct {
	id       int64
	key      T
	expires  *time.Time
	loadedAt time.Time
}

// KeyCacheTTL bounds how long a key is answered from memory without the
// database: the revocation bound on an instance that missed a NOTIFY.
const KeyCacheTTL = 30 * time.Second

// ErrKeyExpired means the key exists but its expires_at has passed.
var ErrKeyExpired = errors.New("api key expired")

// NewKeyCache makes the cache of pool's keys; load turns a stored key
// into T (an error refuses the key). With a Notifier, it forgets every
// key when one is deleted anywhere, and is bypassed while the Notifier
// does not listen; without one (tests), entries live KeyCacheTTL.
func NewKeyCache[T any](ctx context.Context, pool *pgxpool.Pool, n *Notifier, load func(APIKey) (T, error)) (*KeyCache[T], error) {
	h, err := NewKeyHasher(ctx, pool)
	if err != nil {
		return nil, err
	}
	c := &KeyCache[T]{pool: pool, n: n, hasher: h, load: load, ttl: KeyCacheTTL,
		entries: map[string]keyEntry[T]{}, used: map[int64]bool{}}
	if n != nil {
		n.OnNotify(func(ids []int64) {
			if ids == nil || slices.Contains(ids, KeysWakeKey) {
				c.Forget()
			}
		})
	}
	return c, nil
}

// trusted reports whether a key's delete would be heard now: always
// without a Notifier, else while it listens.
func (c *KeyCache[T]) trusted() bool { return c.n == nil || c.n.Listening() }

// Forget drops every cached key.
func (c *KeyCache[T]) Forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
	c.gen++
}

// Resolve returns the key whose secret this is: ErrNotFound for a secret
// Ferry did not make or no key has (deleted included), ErrKeyExpired for
// a key past its expires_at. Each success counts as a use of the key.
func (c *KeyCache[T]) Resolve(ctx context.Context, secret string) (T, error) {
	var zero T
	if !WellFormedKeySecret(secret) {
		return zero, ErrNotFound
	}
	hash := string(c.hasher.Hash(secret))
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[hash]
	gen := c.gen
	c.mu.Unlock()
	if !ok || now.Sub(e.loadedAt) > c.ttl || !c.trusted() {
		k, err := KeyLookup(ctx, c.pool, []byte(hash))
		if err != nil {
			return zero, err
		}
		t, err := c.load(k)
		if err != nil {
			return zero, err
		}
		e = keyEntry[T]{id: k.ID, key: t, expires: k.ExpiresAt, loadedAt: now}
		c.mu.Lock()
		// Not forgotten meanwhile (the row read may be gone), and heard
		// of if it goes from now on.
		if c.gen == gen && c.trusted() {
			c.entries[hash] = e
		}
		c.mu.Unlock()
	}
	if e.expires != nil && !now.Before(*e.expires) {
		return zero, ErrKeyExpired
	}
	c.mu.Lock()
	c.used[e.id] = true
	c.mu.Unlock()
	return e.key, nil
}

// Flush writes the uses recorded since the last Flush (KeyTouch). Call
// it every KeyUsedEvery or so; a failed write keeps the uses for the
// next one.
func (c *KeyCache[T]) Flush(ctx context.Context) error {
	c.mu.Lock()
	ids := make([]int64, 0, len(c.used))
	for id := range c.used {
		ids = append(ids, id)
	}
	clear(c.used)
	c.mu.Unlock()
	slices.Sort(ids)
	if err := KeyTouch(ctx, c.pool, ids); err != nil {
		c.mu.Lock()
		for _, id := range ids {
			c.used[id] = true
		}
		c.mu.Unlock()
		return err
	}
	return nil
}
