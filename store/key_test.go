package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Secrets have Ferry's prefix (for secret scanners), 256 bits of
// randomness and a checksum: a look-alike or a typo is refused by its
// shape, before any lookup.
func TestKeySecretShape(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 200 {
		s := store.NewKeySecret()
		require.True(t, strings.HasPrefix(s, store.KeySecretPrefix), s)
		require.Len(t, s, len(store.KeySecretPrefix)+43+6)
		require.True(t, store.WellFormedKeySecret(s), s)
		require.False(t, seen[s], "secrets repeat")
		seen[s] = true
		// Any one character changed breaks the checksum (or the alphabet).
		for _, i := range []int{len(store.KeySecretPrefix), len(s) / 2, len(s) - 1} {
			b := []byte(s)
			b[i] = map[bool]byte{true: 'A', false: 'B'}[b[i] != 'A']
			require.False(t, store.WellFormedKeySecret(string(b)), "changed at %d: %s", i, b)
		}
	}
	for _, bad := range []string{
		"", store.KeySecretPrefix, "ferry_sk", "admin",
		store.KeySecretPrefix + strings.Repeat("0", 49),
		store.KeySecretPrefix + strings.Repeat("-", 49),
		"xerry_sk_" + strings.TrimPrefix(store.NewKeySecret(), store.KeySecretPrefix),
		store.NewKeySecret() + "0",
	} {
		require.False(t, store.WellFormedKeySecret(bad), "%q", bad)
	}
}

// Key ids are strict: only the form Ferry issues parses.
func TestKeyIDs(t *testing.T) {
	t.Parallel()
	id, ok := store.ParseKeyID(store.FormatKeyID(42))
	require.True(t, ok)
	require.EqualValues(t, 42, id)
	for _, bad := range []string{"", "key_", "42", "key_042", "key_-1", "key_+1", "key_1x", "KEY_1", "key_99999999999999999999", " key_1"} {
		_, ok := store.ParseKeyID(bad)
		require.False(t, ok, "%q", bad)
	}
}

// A key is stored with its keyed hash only, found by the hash of its
// secret, and listed and fetched without it.
func TestKeyCreateLookupList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h, err := store.NewKeyHasher(e.ctx, e.pool)
	require.NoError(t, err)
	perms := json.RawMessage(`[{"resource": "queue:billing-*", "actions": ["send"]}]`)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	k, secret, err := store.KeyCreate(e.ctx, e.pool, h, store.KeyCreateParams{Name: "billing", Permissions: perms, ExpiresAt: &expires})
	require.NoError(t, err)
	require.True(t, store.WellFormedKeySecret(secret))
	require.Equal(t, "billing", k.Name)
	require.JSONEq(t, string(perms), string(k.Permissions))
	require.True(t, expires.Equal(*k.ExpiresAt))
	require.Nil(t, k.LastUsedAt)

	// The secret is nowhere in the database.
	var found int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ferry.api_keys k WHERE k::text LIKE '%' || $1 || '%'`,
		strings.TrimPrefix(secret, store.KeySecretPrefix)).Scan(&found))
	require.Zero(t, found)

	got, err := store.KeyLookup(e.ctx, e.pool, h.Hash(secret))
	require.NoError(t, err)
	require.Equal(t, k.ID, got.ID)
	_, err = store.KeyLookup(e.ctx, e.pool, h.Hash(store.NewKeySecret()))
	require.ErrorIs(t, err, store.ErrNotFound)

	var ids []int64
	for _, name := range []string{"a", "b", "c", "d"} {
		k, _, err := store.KeyCreate(e.ctx, e.pool, h, store.KeyCreateParams{Name: name, Permissions: json.RawMessage(`[]`)})
		require.NoError(t, err)
		require.Nil(t, k.ExpiresAt)
		ids = append(ids, k.ID)
	}
	page, more, err := store.KeyList(e.ctx, e.pool, store.PageParams{Limit: 2})
	require.NoError(t, err)
	require.True(t, more)
	require.Equal(t, []string{"billing", "a"}, keyNames(page))
	page, more, err = store.KeyList(e.ctx, e.pool, store.PageParams{After: store.FormatKeyID(page[1].ID), Limit: 2})
	require.NoError(t, err)
	require.True(t, more)
	require.Equal(t, []string{"b", "c"}, keyNames(page))
	page, more, err = store.KeyList(e.ctx, e.pool, store.PageParams{After: store.FormatKeyID(page[1].ID), Limit: 2})
	require.NoError(t, err)
	require.False(t, more)
	require.Equal(t, []string{"d"}, keyNames(page))
	_, _, err = store.KeyList(e.ctx, e.pool, store.PageParams{After: "d", Limit: 2})
	var verr *store.ValidationError
	require.ErrorAs(t, err, &verr)

	one, err := store.KeyGet(e.ctx, e.pool, ids[2])
	require.NoError(t, err)
	require.Equal(t, "c", one.Name)
	_, err = store.KeyGet(e.ctx, e.pool, ids[3]+100)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func keyNames(keys []store.APIKey) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Name)
	}
	return out
}

// The stored hash is keyed (HMAC-SHA256 under the installation's key,
// made by the migration: see migrations' TestKeyHashKeyPerInstallation),
// not a plain digest of the secret.
func TestKeyHashIsKeyed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h, err := store.NewKeyHasher(e.ctx, e.pool)
	require.NoError(t, err)
	secret := store.NewKeySecret()
	plain := sha256.Sum256([]byte(secret))
	require.Len(t, h.Hash(secret), 32)
	require.NotEqual(t, plain[:], h.Hash(secret))
	require.Equal(t, h.Hash(secret), h.Hash(secret))
	require.NotEqual(t, h.Hash(secret), h.Hash(store.NewKeySecret()))
}

// A delete is announced to every instance when it commits, and only
// then: a rolled-back delete announces nothing.
func TestKeyDeleteNotifies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h, err := store.NewKeyHasher(e.ctx, e.pool)
	require.NoError(t, err)
	k, _, err := store.KeyCreate(e.ctx, e.pool, h, store.KeyCreateParams{Name: "gone", Permissions: json.RawMessage(`[]`)})
	require.NoError(t, err)
	heard := e.listenNotifications()

	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	require.NoError(t, store.KeyDelete(e.ctx, tx, k.ID))
	require.NoError(t, tx.Rollback(e.ctx))
	_, ok := heard()
	require.False(t, ok, "a rolled-back delete must not be announced")
	_, err = store.KeyGet(e.ctx, e.pool, k.ID)
	require.NoError(t, err)

	require.NoError(t, store.KeyDelete(e.ctx, e.pool, k.ID))
	payload, ok := heard()
	require.True(t, ok)
	require.Equal(t, "-9223372036854775807", payload)
	_, err = store.KeyGet(e.ctx, e.pool, k.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	err = store.KeyDelete(e.ctx, e.pool, k.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, ok = heard()
	require.False(t, ok, "deleting nothing announces nothing")
}

// last_used_at is kept coarsely: a touch writes a key's row only when its
// last_used_at is older than KeyUsedEvery, so constant use costs one
// write a minute, not one a request.
func TestKeyTouchIsCoarse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h, err := store.NewKeyHasher(e.ctx, e.pool)
	require.NoError(t, err)
	var ids []int64
	for _, name := range []string{"fresh", "stale"} {
		k, _, err := store.KeyCreate(e.ctx, e.pool, h, store.KeyCreateParams{Name: name, Permissions: json.RawMessage(`[]`)})
		require.NoError(t, err)
		ids = append(ids, k.ID)
	}
	require.NoError(t, store.KeyTouch(e.ctx, e.pool, ids))
	first := map[int64]time.Time{}
	for _, id := range ids {
		k, err := store.KeyGet(e.ctx, e.pool, id)
		require.NoError(t, err)
		require.NotNil(t, k.LastUsedAt, "the first use is recorded")
		first[id] = *k.LastUsedAt
	}
	// One key's use is over a minute old; the other's is recent.
	_, err = e.pool.Exec(e.ctx, `UPDATE ferry.api_keys SET last_used_at = last_used_at - interval '61 seconds' WHERE id = $1`, ids[1])
	require.NoError(t, err)
	old, err := store.KeyGet(e.ctx, e.pool, ids[1])
	require.NoError(t, err)

	var xminBefore uint32
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT xmin::text::bigint FROM ferry.api_keys WHERE id = $1`, ids[0]).Scan(&xminBefore))
	require.NoError(t, store.KeyTouch(e.ctx, e.pool, ids))
	var xminAfter uint32
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT xmin::text::bigint FROM ferry.api_keys WHERE id = $1`, ids[0]).Scan(&xminAfter))
	require.Equal(t, xminBefore, xminAfter, "a recent use is not written again")
	fresh, err := store.KeyGet(e.ctx, e.pool, ids[0])
	require.NoError(t, err)
	require.True(t, first[ids[0]].Equal(*fresh.LastUsedAt))
	stale, err := store.KeyGet(e.ctx, e.pool, ids[1])
	require.NoError(t, err)
	require.True(t, stale.LastUsedAt.After(*old.LastUsedAt), "a use over a minute old is written")

	require.NoError(t, store.KeyTouch(e.ctx, e.pool, nil))
	require.NoError(t, store.KeyTouch(e.ctx, e.pool, []int64{ids[1] + 100}), "touching a deleted key is no error")
}

// cachedKey is what the tests' caches load: the stored key's name.
func cachedKey(k store.APIKey) (string, error) { return k.Name, nil }

// listeningCache is one instance's key cache: its own pool, a running
// Notifier, and a cache told of key deletes through it. It returns once
// the Notifier listens.
func listeningCache(t *testing.T, e *env) *store.KeyCache[string] {
	t.Helper()
	return listeningCacheOn(t, e, e.newPool(4), nil)
}

// listeningCacheOn is listeningCache on pool, whose Notifier also tells
// also (if given) what it hears, after the cache.
func listeningCacheOn(t *testing.T, e *env, pool *pgxpool.Pool, also func(ids []int64)) *store.KeyCache[string] {
	t.Helper()
	n := store.NewNotifier(pool, 0, slog.New(slog.DiscardHandler))
	var once sync.Once
	listening := make(chan struct{})
	n.OnNotify(func(ids []int64) {
		if ids == nil {
			once.Do(func() { close(listening) })
		}
	})
	c, err := store.NewKeyCache(e.ctx, pool, n, cachedKey)
	require.NoError(t, err)
	if also != nil {
		n.OnNotify(also)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-listening:
	case <-time.After(20 * time.Second):
		t.Fatal("the notifier never listened")
	}
	return c
}

// memoryCache is a key cache told of no deletes: it answers from memory
// until it forgets.
func memoryCache(t *testing.T, e *env) *store.KeyCache[string] {
	t.Helper()
	c, err := store.NewKeyCache(e.ctx, e.pool, nil, cachedKey)
	require.NoError(t, err)
	return c
}

func createKey(t *testing.T, e *env, name string, expires *time.Time) (store.APIKey, string) {
	t.Helper()
	h, err := store.NewKeyHasher(e.ctx, e.pool)
	require.NoError(t, err)
	k, secret, err := store.KeyCreate(e.ctx, e.pool, h, store.KeyCreateParams{Name: name, Permissions: json.RawMessage(`[]`), ExpiresAt: expires})
	require.NoError(t, err)
	return k, secret
}

// A key once seen is answered from memory: with its row gone behind the
// cache's back (no NOTIFY), the cache still knows it, until it forgets.
func TestKeyCacheAnswersFromMemory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := memoryCache(t, e)
	k, secret := createKey(t, e, "worker", nil)
	name, err := c.Resolve(e.ctx, secret)
	require.NoError(t, err)
	require.Equal(t, "worker", name)

	_, err = e.pool.Exec(e.ctx, `DELETE FROM ferry.api_keys WHERE id = $1`, k.ID)
	require.NoError(t, err)
	name, err = c.Resolve(e.ctx, secret)
	require.NoError(t, err, "answered from memory, not the database")
	require.Equal(t, "worker", name)

	c.Forget()
	_, err = c.Resolve(e.ctx, secret)
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, bad := range []string{"", "admin", store.NewKeySecret(), secret + "x"} {
		_, err = c.Resolve(e.ctx, bad)
		require.ErrorIs(t, err, store.ErrNotFound, "%q", bad)
	}
}

// A key deleted through one instance is refused by every instance within
// a second (API.md § Access control): the delete's NOTIFY has every
// listening cache recheck its keys, and drop the deleted one (only).
func TestKeyCacheRevocationReachesEveryInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := listeningCache(t, e), listeningCache(t, e)
	k, secret := createKey(t, e, "revoked", nil)
	_, other := createKey(t, e, "kept", nil)
	for _, c := range []*store.KeyCache[string]{a, b} {
		_, err := c.Resolve(e.ctx, secret)
		require.NoError(t, err)
		_, err = c.Resolve(e.ctx, other)
		require.NoError(t, err)
	}

	require.NoError(t, store.KeyDelete(e.ctx, e.pool, k.ID))
	deleted := time.Now()
	for i, c := range []*store.KeyCache[string]{a, b} {
		require.Eventually(t, func() bool {
			_, err := c.Resolve(e.ctx, secret)
			return err != nil
		}, time.Second, time.Millisecond, "instance %d still takes the deleted key", i)
		t.Logf("instance %d refuses the deleted key %s after the delete", i, time.Since(deleted))
		_, err := c.Resolve(e.ctx, secret)
		require.ErrorIs(t, err, store.ErrNotFound)
		name, err := c.Resolve(e.ctx, other)
		require.NoError(t, err, "other keys keep working")
		require.Equal(t, "kept", name)
	}
}

// An expired key is refused as expired, from the database and from memory.
func TestKeyCacheExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := memoryCache(t, e)
	past := time.Now().Add(-time.Second)
	_, expired := createKey(t, e, "expired", &past)
	_, err := c.Resolve(e.ctx, expired)
	require.ErrorIs(t, err, store.ErrKeyExpired)

	soon := time.Now().Add(300 * time.Millisecond)
	_, secret := createKey(t, e, "soon", &soon)
	_, err = c.Resolve(e.ctx, secret)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := c.Resolve(e.ctx, secret)
		return err != nil
	}, 10*time.Second, time.Millisecond)
	require.False(t, time.Now().Before(soon), "refused before it expired")
	_, err = c.Resolve(e.ctx, secret)
	require.ErrorIs(t, err, store.ErrKeyExpired, "expiry is checked on every request, cached or not")
}

// Uses are written by Flush, once for any number of requests, and only
// for the keys used.
func TestKeyCacheFlushRecordsUses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := memoryCache(t, e)
	used, secret := createKey(t, e, "used", nil)
	idle, _ := createKey(t, e, "idle", nil)
	for range 50 {
		_, err := c.Resolve(e.ctx, secret)
		require.NoError(t, err)
	}
	k, err := store.KeyGet(e.ctx, e.pool, used.ID)
	require.NoError(t, err)
	require.Nil(t, k.LastUsedAt, "no write per request")
	require.NoError(t, c.Flush(e.ctx))
	k, err = store.KeyGet(e.ctx, e.pool, used.ID)
	require.NoError(t, err)
	require.NotNil(t, k.LastUsedAt)
	k, err = store.KeyGet(e.ctx, e.pool, idle.ID)
	require.NoError(t, err)
	require.Nil(t, k.LastUsedAt)
	require.NoError(t, c.Flush(e.ctx), "nothing to write")
}

// While its Notifier does not listen, a cache cannot hear deletes, so it
// is not used: every request reads its key. While it listens, a key is
// answered from memory.
func TestKeyCacheBypassedWhileNotListening(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pool := e.newPool(4)
	n := store.NewNotifier(pool, 0, slog.New(slog.DiscardHandler))
	c, err := store.NewKeyCache(e.ctx, pool, n, cachedKey)
	require.NoError(t, err)
	gone := func(k store.APIKey) {
		_, err := e.pool.Exec(e.ctx, `DELETE FROM ferry.api_keys WHERE id = $1`, k.ID) // no NOTIFY
		require.NoError(t, err)
	}

	k, secret := createKey(t, e, "before", nil)
	_, err = c.Resolve(e.ctx, secret)
	require.NoError(t, err)
	gone(k)
	_, err = c.Resolve(e.ctx, secret)
	require.ErrorIs(t, err, store.ErrNotFound, "never listened: read from the database")

	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, n.Listening, 20*time.Second, time.Millisecond)
	k, secret = createKey(t, e, "while", nil)
	_, err = c.Resolve(e.ctx, secret)
	require.NoError(t, err)
	gone(k)
	_, err = c.Resolve(e.ctx, secret)
	require.NoError(t, err, "listening: answered from memory")

	cancel()
	<-done
	require.False(t, n.Listening())
	_, err = c.Resolve(e.ctx, secret)
	require.ErrorIs(t, err, store.ErrNotFound, "the listener is gone: read from the database again")
}
