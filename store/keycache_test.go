package store_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// cachedKey is what the tests' caches load: the stored key's name.
func cachedKey(k store.APIKey) (string, error) { return k.Name, nil }

// listeningCache is one instance's key cache: its own pool, a running
// Notifier, and a cache told of key deletes through it. It returns once
// the Notifier listens.
func listeningCache(t *testing.T, e *env) *store.KeyCache[string] {
	t.Helper()
	pool := e.newPool(4)
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
	c, err := store.NewKeyCache(e.ctx, e.pool, nil, cachedKey)
	require.NoError(t, err)
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
// a second (API.md § Access control): the delete's NOTIFY empties every
// listening cache.
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
	c, err := store.NewKeyCache(e.ctx, e.pool, nil, cachedKey)
	require.NoError(t, err)
	past := time.Now().Add(-time.Second)
	_, expired := createKey(t, e, "expired", &past)
	_, err = c.Resolve(e.ctx, expired)
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
	c, err := store.NewKeyCache(e.ctx, e.pool, nil, cachedKey)
	require.NoError(t, err)
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
