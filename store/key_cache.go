package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"
)

// KeyCache answers "which key is this secret?" ([KeyCache.Resolve]), and
// "which key has this id?" ([KeyCache.ResolveID], for SigV4), from memory:
// a request costs no database read once its key has been seen. An entry lives at
// most [KeyCacheTTL]. When any instance deletes a key (KeyDelete's NOTIFY
// of [KeysWakeKey], heard through the [Notifier]) the cache rechecks the keys
// it holds: one read of their ids, after which the deleted ones are gone
// (at most one such read per [KeyRecheckEvery]). Every entry is dropped
// whenever the Notifier (re)starts listening, since a delete may have
// gone unheard meanwhile; while the Notifier is not listening, known keys are not
// answered from memory (every such request reads its key). So a deleted
// key is refused by every instance within the NOTIFY's delivery and one
// read (milliseconds; KeyRecheckEvery at most when NOTIFYs come faster).
// KeyCacheTTL bounds an entry's life besides. Uses are recorded in memory
// and written by Flush ([KeyTouch]: at most once a minute per key).
//
// A secret no key has is remembered too (by its hash), for [KeyMissTTL], so
// that a client presenting one over and over costs one lookup per
// KeyMissTTL, not one per request, and is refused without the database
// while that is down. At most [KeyMissLimit] such secrets are remembered,
// the oldest forgotten first, so random secrets cannot grow the cache.
// They are dropped with the keys when the Notifier (re)starts listening,
// and also when any instance creates a key (KeyCreate's NOTIFY of
// [KeyCreatedWakeKey], which leaves the known keys be); a remembered secret
// outlives its key's creation only on an instance that did not hear of it
// (its listener down, or a key row written behind Ferry's back, e.g.
// restored): there it is refused for at most KeyMissTTL. Concurrent
// lookups of one secret share one query.
//
// Any database login can NOTIFY on Ferry's channel, so a key NOTIFY is a
// hint, never an order: it costs at most one recheck per KeyRecheckEvery
// however many come (a read of the cached keys' ids by primary key, and
// forgetting the secrets no key had), and drops only the keys that read
// found gone.
//
// T is the key as its user needs it (internal/access parses the
// permissions once, when the key is loaded).
type KeyCache[T any] struct {
	pool   *pgxpool.Pool
	n      *Notifier
	hasher *KeyHasher
	load   func(APIKey) (T, error)
	ttl    time.Duration
	flight singleflight.Group // lookups in progress, by hash and gen

	mu        sync.Mutex
	entries   map[string]keyEntry[T] // by hash, or by id (ResolveID)
	missing   keyMisses
	missTTL   time.Duration
	missLimit int
	used      map[int64]bool
	gen       uint64 // bumped by Forget and rechecks: a key read before it is not kept
	missGen   uint64 // bumped by Forget and ForgetMissing: nor a miss
	recheck   keyRecheck
}

// keyRecheck is what key NOTIFYs asked of the cache (keys: recheck the
// keys it holds; misses: forget the secrets no key had) and whether a
// recheck is running or scheduled, which then does it.
type keyRecheck struct {
	every        time.Duration
	keys, misses bool
	running      bool
	last         time.Time // when the last recheck began
}

// keyGens are the cache's generations when a lookup began.
type keyGens struct{ key, miss uint64 }

type keyEntry[T any] struct {
	id       int64
	key      T
	sealed   []byte // by id only: the key's sealed secret (nil: none)
	expires  *time.Time
	loadedAt time.Time
}

// KeyCacheTTL bounds how long a key is answered from memory without the
// database: the revocation bound on an instance that missed a NOTIFY.
const KeyCacheTTL = 30 * time.Second

// KeyRecheckEvery bounds how often a cache acts on key NOTIFYs: the
// first after a quiet spell is acted on at once, those that come within
// KeyRecheckEvery of it are merged into one recheck then. It bounds what
// a flood of NOTIFYs (anyone's, not only Ferry's) costs, one small read
// per KeyRecheckEvery, and adds at most this to a revocation meanwhile.
const KeyRecheckEvery = 100 * time.Millisecond

// KeyMissTTL bounds how long a secret no key has is refused from memory:
// the bound on refusing a new key on an instance that missed its NOTIFY.
const KeyMissTTL = 5 * time.Second

// KeyMissLimit bounds how many secrets no key has are remembered (about
// 150 bytes each: 1.5 MB at most).
const KeyMissLimit = 10000

// keyLookupTimeout bounds a lookup, which is shared by the requests that
// present the same secret meanwhile and so outlives the one that began it.
const keyLookupTimeout = 10 * time.Second

// ErrKeyExpired means the key exists but its expires_at has passed.
var ErrKeyExpired = errors.New("api key expired")

// NewKeyCache makes the cache of pool's keys; load turns a stored key
// into T (an error refuses the key). With a [Notifier], it rechecks its keys
// when a key is deleted anywhere, forgets the secrets it found no key for
// when a key is created anywhere, forgets both when the Notifier (re)starts
// listening, and does not answer known keys from memory while the
// Notifier does not listen; without one (tests), entries live [KeyCacheTTL]
// ([KeyMissTTL] for secrets no key has).
func NewKeyCache[T any](ctx context.Context, pool *pgxpool.Pool, n *Notifier, load func(APIKey) (T, error)) (*KeyCache[T], error) {
	h, err := NewKeyHasher(ctx, pool)
	if err != nil {
		return nil, err
	}
	c := &KeyCache[T]{pool: pool, n: n, hasher: h, load: load, ttl: KeyCacheTTL,
		entries: map[string]keyEntry[T]{}, missing: newKeyMisses(), missTTL: KeyMissTTL, missLimit: KeyMissLimit,
		used: map[int64]bool{}, recheck: keyRecheck{every: KeyRecheckEvery}}
	if n != nil {
		n.OnNotify(func(ids []int64) {
			if ids == nil {
				c.Forget() // (re)started listening: a delete may have gone unheard
				return
			}
			c.recheckSoon(slices.Contains(ids, KeysWakeKey), slices.Contains(ids, KeyCreatedWakeKey))
		})
	}
	return c, nil
}

// trusted reports whether a key's delete would be heard now: always
// without a Notifier, else while it listens.
func (c *KeyCache[T]) trusted() bool { return c.n == nil || c.n.Listening() }

// Forget drops every cached key and every remembered secret no key has.
func (c *KeyCache[T]) Forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
	c.missing.clear()
	c.gen++
	c.missGen++
}

// ForgetMissing drops every remembered secret no key has (a key was
// created), keeping the keys.
func (c *KeyCache[T]) ForgetMissing() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.missing.clear()
	c.missGen++
}

// recheckSoon asks for a recheck (keys: of the cached keys, a key was
// deleted; misses: the secrets no key had are forgotten, a key was
// created): at once after a quiet spell, else merged with every other
// asked for within KeyRecheckEvery of the last one. It never blocks (it
// runs on the Notifier's listener).
func (c *KeyCache[T]) recheckSoon(keys, misses bool) {
	if !keys && !misses {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &c.recheck
	r.keys, r.misses = r.keys || keys, r.misses || misses
	if r.running {
		return
	}
	r.running = true
	time.AfterFunc(max(0, r.every-time.Since(r.last)), c.rechecks)
}

// rechecks runs the rechecks asked for, one per KeyRecheckEvery at most,
// until none is.
func (c *KeyCache[T]) rechecks() {
	for {
		c.mu.Lock()
		r := &c.recheck
		keys, misses := r.keys, r.misses
		if !keys && !misses {
			r.running = false
			c.mu.Unlock()
			return
		}
		began := time.Now()
		r.keys, r.misses, r.last = false, false, began
		every := r.every
		c.mu.Unlock()
		c.recheckOnce(keys, misses)
		time.Sleep(time.Until(began.Add(every)))
	}
}

// recheckOnce forgets the secrets no key had (misses), and reads which of
// the cached keys still exist and drops the others (keys); a failed read
// drops every key it asked about. A lookup under way meanwhile is not
// kept (it may have read a key deleted since).
func (c *KeyCache[T]) recheckOnce(keys, misses bool) {
	c.mu.Lock()
	if misses {
		c.missing.clear()
		c.missGen++
	}
	var ids []int64
	if keys {
		c.gen++
		for _, e := range c.entries {
			ids = append(ids, e.id)
		}
	}
	c.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	ctx, cancel := context.WithTimeout(context.Background(), keyLookupTimeout)
	defer cancel()
	live, err := KeyExisting(ctx, c.pool, ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	for hash, e := range c.entries {
		if _, asked := slices.BinarySearch(ids, e.id); asked && (err != nil || !live[e.id]) {
			delete(c.entries, hash)
		}
	}
}

// Resolve returns the key whose secret this is: [ErrNotFound] for a secret
// Ferry did not make or no key has (deleted included), [ErrKeyExpired] for
// a key past its expires_at. Each success counts as a use of the key.
func (c *KeyCache[T]) Resolve(ctx context.Context, secret string) (T, error) {
	var zero T
	if !WellFormedKeySecret(secret) {
		return zero, ErrNotFound
	}
	hash := c.hasher.Hash(secret)
	e, err := c.resolve(ctx, string(hash), func(ctx context.Context) (APIKey, []byte, error) {
		k, err := KeyLookup(ctx, c.pool, hash)
		return k, nil, err
	})
	return e.key, err
}

// ResolveID returns the key whose id ([FormatKeyID]'s form) this is, and
// its sealed secret (nil if it has none), for the faces that verify a
// signature made with the secret (SigV4): [ErrNotFound] for an id Ferry
// did not issue or no key has (deleted included), [ErrKeyExpired] for a
// key past its expires_at. It is cached, forgotten and counted as a use
// as [KeyCache.Resolve]'s keys are.
func (c *KeyCache[T]) ResolveID(ctx context.Context, id string) (T, []byte, error) {
	var zero T
	n, ok := ParseKeyID(id)
	if !ok {
		return zero, nil, ErrNotFound
	}
	// Not 32 bytes long: no secret's hash.
	e, err := c.resolve(ctx, "\x00id:"+strconv.FormatInt(n, 10), func(ctx context.Context) (APIKey, []byte, error) {
		return KeyGetSealed(ctx, c.pool, n)
	})
	return e.key, e.sealed, err
}

// resolve answers the entry of name (a secret's hash, or an id) from
// memory, or reads it with fetch; see [KeyCache.Resolve].
func (c *KeyCache[T]) resolve(ctx context.Context, name string, fetch keyFetch) (keyEntry[T], error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[name]
	ok = ok && now.Sub(e.loadedAt) <= c.ttl && c.trusted()
	missed := !ok && c.missing.has(name, now.Add(-c.missTTL))
	gen := keyGens{key: c.gen, miss: c.missGen}
	c.mu.Unlock()
	if missed {
		return keyEntry[T]{}, fmt.Errorf("api key lookup: %w", ErrNotFound)
	}
	if !ok {
		var err error
		if e, err = c.lookup(ctx, name, gen, fetch); err != nil {
			return keyEntry[T]{}, err
		}
	}
	if e.expires != nil && !now.Before(*e.expires) {
		return keyEntry[T]{}, ErrKeyExpired
	}
	c.mu.Lock()
	c.used[e.id] = true
	c.mu.Unlock()
	return e, nil
}

// keyFetch reads a key and its sealed secret from the database.
type keyFetch func(ctx context.Context) (APIKey, []byte, error)

// lookup reads the key of name with fetch, sharing the query with every
// request for the same name that comes meanwhile (and after the same
// forgetting, gen): each waits for it as long as its own ctx lets it.
func (c *KeyCache[T]) lookup(ctx context.Context, name string, gen keyGens, fetch keyFetch) (keyEntry[T], error) {
	flight := name + strconv.FormatUint(gen.key, 10) + "." + strconv.FormatUint(gen.miss, 10)
	result := c.flight.DoChan(flight, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keyLookupTimeout)
		defer cancel()
		return c.read(lctx, name, gen, fetch)
	})
	select {
	case r := <-result:
		if r.Err != nil {
			return keyEntry[T]{}, r.Err
		}
		return r.Val.(keyEntry[T]), nil //nolint:forcetypeassert // read returns nothing else
	case <-ctx.Done():
		return keyEntry[T]{}, ctx.Err()
	}
}

// read reads the key of name from the database and keeps what it found,
// or that there is none, unless the cache forgot such answers (gen
// changed) meanwhile: the row read may be gone, or there since.
func (c *KeyCache[T]) read(ctx context.Context, name string, gen keyGens, fetch keyFetch) (keyEntry[T], error) {
	began := time.Now()
	k, sealed, err := fetch(ctx)
	if errors.Is(err, ErrNotFound) {
		c.mu.Lock()
		if c.missGen == gen.miss {
			c.missing.add(name, began, c.missLimit)
		}
		c.mu.Unlock()
	}
	if err != nil {
		return keyEntry[T]{}, err
	}
	t, err := c.load(k)
	if err != nil {
		return keyEntry[T]{}, err
	}
	e := keyEntry[T]{id: k.ID, key: t, sealed: sealed, expires: k.ExpiresAt, loadedAt: began}
	c.mu.Lock()
	// Heard of if it goes from now on.
	if c.gen == gen.key && c.trusted() {
		c.entries[name] = e
	}
	c.missing.remove(name)
	c.mu.Unlock()
	return e, nil
}

// keyMisses remembers the hashes of secrets no key has, with when each
// was looked up, oldest first: a ring of at most the limit's length, so
// that the oldest is the one forgotten to make room.
type keyMisses struct {
	at    map[string]keyMiss
	order []keyMissRef // a ring from next once it is full
	next  int
	seq   uint64
}

type keyMiss struct {
	at  time.Time
	seq uint64 // which of the hash's references in order is current
}

type keyMissRef struct {
	hash string
	seq  uint64
}

func newKeyMisses() keyMisses { return keyMisses{at: map[string]keyMiss{}} }

// has reports whether hash was found missing after since.
func (m *keyMisses) has(hash string, since time.Time) bool {
	miss, ok := m.at[hash]
	return ok && miss.at.After(since)
}

// add remembers that hash was missing at, forgetting the oldest hash if
// limit are remembered already. A hash added again is referenced anew;
// its earlier reference, when its turn comes, forgets nothing.
func (m *keyMisses) add(hash string, at time.Time, limit int) {
	if limit <= 0 {
		return
	}
	m.seq++
	ref := keyMissRef{hash: hash, seq: m.seq}
	if len(m.order) < limit {
		m.order = append(m.order, ref)
	} else {
		old := m.order[m.next]
		if cur, ok := m.at[old.hash]; ok && cur.seq == old.seq {
			delete(m.at, old.hash)
		}
		m.order[m.next] = ref
		m.next = (m.next + 1) % limit
	}
	m.at[hash] = keyMiss{at: at, seq: ref.seq}
}

// remove forgets hash (its reference in order stays, and forgets nothing
// when its turn comes).
func (m *keyMisses) remove(hash string) { delete(m.at, hash) }

// clear forgets every hash.
func (m *keyMisses) clear() {
	clear(m.at)
	m.order, m.next = m.order[:0], 0
}

// len is how many hashes are remembered.
func (m *keyMisses) len() int { return len(m.at) }

// Flush writes the uses recorded since the last Flush ([KeyTouch]). Call
// it every [KeyUsedEvery] or so; a failed write keeps the uses for the
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
