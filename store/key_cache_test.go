package store_test

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// keyScans is how many times ferry.api_keys has been scanned, by an index
// or sequentially, as PostgreSQL's statistics count it: each key lookup
// is one scan. Every idle session of counted first flushes its pending
// statistics (a session otherwise flushes them up to seconds later), so
// the count includes all it ran. The test must leave the table to the
// sessions of counted.
func keyScans(t *testing.T, e *env, counted *pgxpool.Pool) int64 {
	t.Helper()
	for _, c := range counted.AcquireAllIdle(e.ctx) {
		_, err := c.Exec(e.ctx, `SELECT pg_stat_force_next_flush()`)
		c.Release()
		require.NoError(t, err)
	}
	var n int64
	require.NoError(t, e.pool.QueryRow(e.ctx, `
		SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables
		WHERE relid = 'ferry.api_keys'::regclass`).Scan(&n))
	return n
}

// A client that presents the same unknown secret over and over (a
// misconfigured deploy, an attacker) costs the database one lookup, not
// one per request, however many of its requests arrive at once.
func TestKeyCacheUnknownSecretCostsOneLookup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	counted := e.newPool(8)
	c, err := store.NewKeyCache(e.ctx, counted, nil, cachedKey)
	require.NoError(t, err)
	require.Zero(t, keyScans(t, e, counted))

	bad := store.NewKeySecret() // well formed: only the database can tell
	const clients, each = 32, 10
	errs := make(chan error, clients*each)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range each {
				_, err := c.Resolve(e.ctx, bad)
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	require.Equal(t, int64(1), keyScans(t, e, counted), "%d requests with one unknown secret", clients*each)

	other := store.NewKeySecret()
	_, err = c.Resolve(e.ctx, other)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, int64(2), keyScans(t, e, counted), "another secret is looked up")
}

// An unknown secret the cache remembers is refused without the database:
// while it is gone, such a request is a quick 401, not a slow failure.
// A secret it has not seen still needs the database.
func TestKeyCacheRefusesRememberedSecretWithoutDatabase(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pool := e.newPool(2)
	c, err := store.NewKeyCache(e.ctx, pool, nil, cachedKey)
	require.NoError(t, err)
	bad := store.NewKeySecret()
	_, err = c.Resolve(e.ctx, bad)
	require.ErrorIs(t, err, store.ErrNotFound)

	pool.Close() // every further query fails
	_, err = c.Resolve(e.ctx, bad)
	require.ErrorIs(t, err, store.ErrNotFound, "remembered")
	_, err = c.Resolve(e.ctx, store.NewKeySecret())
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrNotFound, "never seen: the database's failure, not a refusal")
}

// An unknown secret is remembered for the miss TTL only: then the next
// request looks it up again (once).
func TestKeyCacheUnknownSecretExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	counted := e.newPool(2)
	c, err := store.NewKeyCache(e.ctx, counted, nil, cachedKey)
	require.NoError(t, err)
	const ttl = 200 * time.Millisecond
	c.SetMissLimits(ttl, store.KeyMissLimit)
	bad := store.NewKeySecret()
	_, err = c.Resolve(e.ctx, bad)
	require.ErrorIs(t, err, store.ErrNotFound)
	looked := time.Now()
	_, err = c.Resolve(e.ctx, bad)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, int64(1), keyScans(t, e, counted))

	time.Sleep(ttl - time.Since(looked) + 10*time.Millisecond) // the TTL passing, not synchronisation
	for range 5 {
		_, err = c.Resolve(e.ctx, bad)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	require.Equal(t, int64(2), keyScans(t, e, counted), "looked up again once, and remembered anew")
}

// However many different unknown secrets arrive (random tokens), the
// cache remembers at most its limit of them, the latest: the oldest are
// forgotten first, and a secret presented again is remembered anew.
func TestKeyCacheUnknownSecretsAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	counted := e.newPool(4)
	c, err := store.NewKeyCache(e.ctx, counted, nil, cachedKey)
	require.NoError(t, err)
	const limit = 50
	c.SetMissLimits(time.Minute, limit)
	require.Equal(t, 10000, store.KeyMissLimit, "the production limit")

	var secrets []string
	for i := range 20 * limit {
		s := store.NewKeySecret()
		secrets = append(secrets, s)
		_, err := c.Resolve(e.ctx, s)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Equal(t, min(i+1, limit), c.Missing())
	}
	// The first secret comes back: it is looked up and remembered as the
	// newest, and so survives the next limit-1 secrets.
	_, err = c.Resolve(e.ctx, secrets[0])
	require.ErrorIs(t, err, store.ErrNotFound)
	for range limit - 1 {
		s := store.NewKeySecret()
		secrets = append(secrets, s)
		_, err := c.Resolve(e.ctx, s)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	require.Equal(t, limit, c.Missing())
	before := keyScans(t, e, counted)
	require.Equal(t, int64(len(secrets)+1), before, "one lookup per new secret")
	latest := append([]string{secrets[0]}, secrets[len(secrets)-(limit-1):]...)
	for _, s := range latest {
		_, err := c.Resolve(e.ctx, s)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	require.Equal(t, before, keyScans(t, e, counted), "the latest %d are answered from memory", limit)
	_, err = c.Resolve(e.ctx, secrets[1])
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, before+1, keyScans(t, e, counted), "an old one was forgotten")
	require.Equal(t, limit, c.Missing())
}

// A secret refused before its key existed is accepted once the key is
// made: at once where the cache forgets such secrets (this instance,
// after its own create), and on every instance when the create's NOTIFY
// is heard, well within the miss TTL. A create leaves the keys the caches
// know in memory.
func TestKeyCacheCreatedKeyAcceptedEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Made before the caches listen: its NOTIFY is heard by none.
	known, knownSecret := createKey(t, e, "known", nil)
	local := memoryCache(t, e)
	a, b := listeningCache(t, e), listeningCache(t, e)
	caches := []*store.KeyCache[string]{local, a, b}
	h, err := store.NewKeyHasher(e.ctx, e.pool)
	require.NoError(t, err)
	secret := store.NewKeySecret()
	for _, c := range caches {
		for range 2 {
			_, err := c.Resolve(e.ctx, secret)
			require.ErrorIs(t, err, store.ErrNotFound)
		}
	}
	for _, c := range caches {
		_, err := c.Resolve(e.ctx, knownSecret)
		require.NoError(t, err)
	}
	_, err = e.pool.Exec(e.ctx, `DELETE FROM ferry.api_keys WHERE id = $1`, known.ID) // no NOTIFY
	require.NoError(t, err)

	_, err = store.KeyCreateWithSecret(e.ctx, e.pool, h, store.KeyCreateParams{Name: "late", Permissions: json.RawMessage(`[]`)}, secret)
	require.NoError(t, err)
	created := time.Now()
	_, err = local.Resolve(e.ctx, secret)
	require.ErrorIs(t, err, store.ErrNotFound, "remembered, with no NOTIFY to hear")
	local.ForgetMissing()
	name, err := local.Resolve(e.ctx, secret)
	require.NoError(t, err, "forgotten: read again")
	require.Equal(t, "late", name)
	for i, c := range []*store.KeyCache[string]{a, b} {
		require.Eventually(t, func() bool {
			_, err := c.Resolve(e.ctx, secret)
			return err == nil
		}, time.Second, time.Millisecond, "instance %d still refuses the created key", i)
		t.Logf("instance %d takes the created key %s after the create", i, time.Since(created))
		require.Less(t, time.Since(created), store.KeyMissTTL)
	}
	for i, c := range caches {
		name, err := c.Resolve(e.ctx, knownSecret)
		require.NoError(t, err, "cache %d: the create emptied the known keys", i)
		require.Equal(t, "known", name)
	}
}

// A create is announced to every instance when it commits, and only then.
func TestKeyCreateNotifies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h, err := store.NewKeyHasher(e.ctx, e.pool)
	require.NoError(t, err)
	heard := e.listenNotifications()
	p := store.KeyCreateParams{Name: "new", Permissions: json.RawMessage(`[]`)}

	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	_, _, err = store.KeyCreate(e.ctx, tx, h, p)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(e.ctx))
	_, ok := heard()
	require.False(t, ok, "a rolled-back create must not be announced")

	k, secret, err := store.KeyCreate(e.ctx, e.pool, h, p)
	require.NoError(t, err)
	payload, ok := heard()
	require.True(t, ok)
	require.Equal(t, "-9223372036854775805", payload)
	got, err := store.KeyLookup(e.ctx, e.pool, h.Hash(secret))
	require.NoError(t, err)
	require.Equal(t, k, got, "the key answered is the one stored")
}

// Any database login can NOTIFY on Ferry's channel. A flood of forged key
// NOTIFYs (the values KeyDelete and KeyCreate send, alone and among other
// ids and junk) costs a listening cache at most a few small reads per
// KeyRecheckEvery, never a lookup per request of a key it knows, nor of a
// secret it remembers as no key's; and a real delete meanwhile is still
// refused within a second.
func TestKeyCacheForgedNotifyFlood(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	counted := e.newPool(4)
	const sentinel = 424242
	heardSentinel := make(chan struct{})
	var once sync.Once
	c := listeningCacheOn(t, e, counted, func(ids []int64) {
		if slices.Contains(ids, sentinel) {
			once.Do(func() { close(heardSentinel) })
		}
	})
	_, keptSecret := createKey(t, e, "kept", nil)
	revoked, revokedSecret := createKey(t, e, "revoked", nil)
	bad := store.NewKeySecret()
	resolve := func() {
		name, err := c.Resolve(e.ctx, keptSecret)
		require.NoError(t, err)
		require.Equal(t, "kept", name)
		_, err = c.Resolve(e.ctx, bad)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	resolve()
	_, err := c.Resolve(e.ctx, revokedSecret)
	require.NoError(t, err)
	before := keyScans(t, e, counted)

	// The forger: a login of its own, one NOTIFY per transaction.
	forger, err := pgx.Connect(e.ctx, e.dbURL)
	require.NoError(t, err)
	defer forger.Close(e.ctx)
	payloads := []string{
		fmt.Sprint(store.KeysWakeKey), fmt.Sprint(store.KeyCreatedWakeKey), "-9223372036854775807",
		fmt.Sprintf("7,%d,%d", store.KeysWakeKey, store.KeyCreatedWakeKey), fmt.Sprintf("junk,%d,", store.KeysWakeKey),
	}
	const forged = 1500
	var sent atomic.Int64
	flooded := make(chan error, 1)
	start := time.Now()
	go func() {
		for i := range forged {
			if _, err := forger.Exec(e.ctx, `SELECT pg_notify('ferry_messages', $1)`, payloads[i%len(payloads)]); err != nil {
				flooded <- err
				return
			}
			sent.Add(1)
		}
		flooded <- nil
	}()
	for sent.Load() < forged/3 {
		resolve()
	}
	require.NoError(t, store.KeyDelete(e.ctx, e.pool, revoked.ID))
	deleted := time.Now()
	for {
		_, err := c.Resolve(e.ctx, revokedSecret)
		if err != nil {
			require.ErrorIs(t, err, store.ErrNotFound)
			break
		}
		require.Less(t, time.Since(deleted), time.Second, "the deleted key is still taken amid the flood")
		resolve()
	}
	revokedIn := time.Since(deleted)
	for sent.Load() < forged {
		resolve()
	}
	require.NoError(t, <-flooded)
	_, err = forger.Exec(e.ctx, `SELECT pg_notify('ferry_messages', $1)`, fmt.Sprint(sentinel))
	require.NoError(t, err)
	select {
	case <-heardSentinel:
	case <-time.After(10 * time.Second):
		t.Fatal("the flood was never heard to its end")
	}
	resolve()
	took := time.Since(start)
	reads := keyScans(t, e, counted) - before
	// Each recheck reads the cached keys' ids once and forgets the bad
	// secret (one more lookup of it, and of the deleted key's); the
	// delete's own scan may be counted too.
	rechecks := int64(math.Ceil(float64(took)/float64(store.KeyRecheckEvery))) + 2
	t.Logf("%d forged NOTIFYs over %s: %d reads of ferry.api_keys (at most %d rechecks); the deleted key refused after %s",
		forged, took, reads, rechecks, revokedIn)
	require.LessOrEqual(t, reads, 3*rechecks+1, "reads of ferry.api_keys during the flood")
}

// A key found by its id (SigV4's access key id) is cached and forgotten as
// a key found by its secret: revoked through one instance, it is refused
// by every instance within a second; other keys keep working.
func TestKeyCacheResolveIDRevocation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := listeningCache(t, e), listeningCache(t, e)
	sealer := newSealer(t, newSealKey(t))
	k, secret := createSealedKey(t, e, "revoked", sealer, nil)
	other, _ := createSealedKey(t, e, "kept", sealer, nil)
	id, otherID := store.FormatKeyID(k.ID), store.FormatKeyID(other.ID)
	for _, c := range []*store.KeyCache[string]{a, b} {
		name, sealed, err := c.ResolveID(e.ctx, id)
		require.NoError(t, err)
		require.Equal(t, "revoked", name)
		got, err := sealer.Open(k.ID, sealed)
		require.NoError(t, err)
		require.Equal(t, secret, got)
		_, _, err = c.ResolveID(e.ctx, otherID)
		require.NoError(t, err)
	}

	require.NoError(t, store.KeyDelete(e.ctx, e.pool, k.ID))
	deleted := time.Now()
	for i, c := range []*store.KeyCache[string]{a, b} {
		require.Eventually(t, func() bool {
			_, _, err := c.ResolveID(e.ctx, id)
			return err != nil
		}, time.Second, time.Millisecond, "instance %d still takes the deleted key's id", i)
		t.Logf("instance %d refuses the deleted key's id %s after the delete", i, time.Since(deleted))
		_, _, err := c.ResolveID(e.ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
		name, _, err := c.ResolveID(e.ctx, otherID)
		require.NoError(t, err, "other keys keep working")
		require.Equal(t, "kept", name)
	}
}

// By id: answered from memory once seen (its row deleted behind the
// cache's back, no NOTIFY), until forgotten; an expired key is expired;
// an unknown id costs one lookup; what is not an id Ferry issued costs
// none; a key without a seal answers nil; a lookup by id and one by
// secret of the same key are both answered.
func TestKeyCacheResolveID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pool := e.newPool(4)
	c, err := store.NewKeyCache(e.ctx, pool, nil, cachedKey)
	require.NoError(t, err)
	k, secret := createSealedKey(t, e, "worker", newSealer(t, newSealKey(t)), nil)
	id := store.FormatKeyID(k.ID)
	name, sealed, err := c.ResolveID(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "worker", name)
	require.NotNil(t, sealed)
	name, err = c.Resolve(e.ctx, secret)
	require.NoError(t, err)
	require.Equal(t, "worker", name)

	_, err = e.pool.Exec(e.ctx, `DELETE FROM ferry.api_keys WHERE id = $1`, k.ID)
	require.NoError(t, err)
	_, _, err = c.ResolveID(e.ctx, id)
	require.NoError(t, err, "answered from memory")
	c.Forget()
	_, _, err = c.ResolveID(e.ctx, id)
	require.ErrorIs(t, err, store.ErrNotFound)

	past := time.Now().Add(-time.Second)
	expired, _ := createSealedKey(t, e, "expired", nil, &past)
	name, sealed, err = c.ResolveID(e.ctx, store.FormatKeyID(expired.ID))
	require.ErrorIs(t, err, store.ErrKeyExpired)
	require.Empty(t, name)
	require.Nil(t, sealed)
	plain, _ := createSealedKey(t, e, "plain", nil, nil)
	name, sealed, err = c.ResolveID(e.ctx, store.FormatKeyID(plain.ID))
	require.NoError(t, err)
	require.Equal(t, "plain", name)
	require.Nil(t, sealed, "a key made without a sealer has no seal")

	scans := keyScans(t, e, pool)
	for range 20 {
		_, _, err = c.ResolveID(e.ctx, store.FormatKeyID(k.ID+1000))
		require.ErrorIs(t, err, store.ErrNotFound)
		for _, bad := range []string{"", "admin", "key_", "key_0", "key_01", "AKIAIOSFODNN7EXAMPLE", secret} {
			_, _, err = c.ResolveID(e.ctx, bad)
			require.ErrorIs(t, err, store.ErrNotFound, "%q", bad)
		}
	}
	require.Equal(t, scans+1, keyScans(t, e, pool), "an unknown id costs one lookup, a malformed one none")
}
