package store_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// newSealKey is a random server key.
func newSealKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, store.KeySealKeyBytes)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

func newSealer(t *testing.T, current []byte, previous ...[]byte) *store.KeySealer {
	t.Helper()
	s, err := store.NewKeySealer(current, previous...)
	require.NoError(t, err)
	return s
}

// createSealedKey makes a key whose secret sealer seals.
func createSealedKey(t *testing.T, e *env, name string, sealer *store.KeySealer, expires *time.Time) (store.APIKey, string) {
	t.Helper()
	h, err := store.NewKeyHasher(e.ctx, e.pool)
	require.NoError(t, err)
	k, secret, err := store.KeyCreate(e.ctx, e.pool, h, store.KeyCreateParams{
		Name: name, Permissions: json.RawMessage(`[]`), ExpiresAt: expires, Sealer: sealer})
	require.NoError(t, err)
	return k, secret
}

func sealedOf(t *testing.T, e *env, id int64) []byte {
	t.Helper()
	_, sealed, err := store.KeyGetSealed(e.ctx, e.pool, id)
	require.NoError(t, err)
	return sealed
}

// What a dump of the database holds of a key (its row, as COPY writes
// it, and the per-database hash key beside it) contains neither the
// secret nor anything that opens its seal: not the hash key, not another
// server key. Only the server key of the environment opens it.
func TestKeySealDumpYieldsNoSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	serverKey := newSealKey(t)
	k, secret := createSealedKey(t, e, "dumped", newSealer(t, serverKey), nil)

	conn, err := e.pool.Acquire(e.ctx)
	require.NoError(t, err)
	defer conn.Release()
	var dump bytes.Buffer
	for _, table := range []string{"ferry.api_keys", "ferry.api_key_settings"} {
		_, err = conn.Conn().PgConn().CopyTo(e.ctx, &dump, "COPY "+table+" TO STDOUT (FORMAT binary)")
		require.NoError(t, err)
		_, err = conn.Conn().PgConn().CopyTo(e.ctx, &dump, "COPY "+table+" TO STDOUT")
		require.NoError(t, err)
	}
	body := strings.TrimPrefix(secret, store.KeySecretPrefix)
	for _, part := range []string{secret, body, body[:20], body[20:40]} {
		require.NotContains(t, dump.String(), part, "the dump holds the secret")
	}

	sealed := sealedOf(t, e, k.ID)
	require.NotNil(t, sealed)
	require.NotContains(t, string(sealed), body[:8])
	var hashKey []byte
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT key_hash_key FROM ferry.api_key_settings`).Scan(&hashKey))
	for name, key := range map[string][]byte{"the dump's hash key": hashKey, "another server key": newSealKey(t)} {
		_, err := newSealer(t, key).Open(k.ID, sealed)
		var se *store.KeySealError
		require.ErrorAs(t, err, &se, name)
		require.NotContains(t, err.Error(), body[:8])
	}
	got, err := newSealer(t, serverKey).Open(k.ID, sealed)
	require.NoError(t, err)
	require.Equal(t, secret, got, "the server key opens it")
}

// A seal opens only as the row it was made for, unaltered: copied to
// another key's row, or with any byte changed (its fingerprint included),
// it does not open; two seals of one secret differ (random nonces).
func TestKeySealBoundToItsRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sealer := newSealer(t, newSealKey(t))
	a, secretA := createSealedKey(t, e, "a", sealer, nil)
	b, _ := createSealedKey(t, e, "b", sealer, nil)
	sealA := sealedOf(t, e, a.ID)

	_, err := e.pool.Exec(e.ctx, `UPDATE ferry.api_keys SET sealed_secret = $2 WHERE id = $1`, b.ID, sealA)
	require.NoError(t, err)
	moved := sealedOf(t, e, b.ID)
	require.Equal(t, sealA, moved)
	_, err = sealer.Open(b.ID, moved)
	var se *store.KeySealError
	require.ErrorAs(t, err, &se, "a seal moved to another row does not open")
	require.Equal(t, sealer.Fingerprint(), se.Fingerprint)
	got, err := sealer.Open(a.ID, sealA)
	require.NoError(t, err)
	require.Equal(t, secretA, got)

	for i := range sealA {
		bad := bytes.Clone(sealA)
		bad[i] ^= 0x01
		_, err := sealer.Open(a.ID, bad)
		require.Error(t, err, "byte %d changed", i)
	}
	for _, bad := range [][]byte{nil, {}, {1}, sealA[:9], sealA[:30], sealA[:len(sealA)-1]} {
		_, err := sealer.Open(a.ID, bad)
		require.ErrorAs(t, err, &se, "%x", bad)
	}
	require.NotEqual(t, sealer.Seal(a.ID, secretA), sealer.Seal(a.ID, secretA), "nonces repeat")
}

// Rotating the server key: a sealer with the old key as previous opens
// the old seals and seals new keys under the new one; KeySealRotate
// reseals the old seals (once: a second run finds nothing), after which
// the new key alone opens every seal.
func TestKeySealRotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	oldKey, newKey := newSealKey(t), newSealKey(t)
	oldSealer := newSealer(t, oldKey)
	rotating := newSealer(t, newKey, oldKey)
	require.NotEqual(t, oldSealer.Fingerprint(), rotating.Fingerprint())
	require.Len(t, rotating.Fingerprint(), 16)

	before, beforeSecret := createSealedKey(t, e, "before", oldSealer, nil)
	plain, _ := createSealedKey(t, e, "plain", nil, nil)
	after, afterSecret := createSealedKey(t, e, "after", rotating, nil)
	require.Nil(t, sealedOf(t, e, plain.ID), "a key made without a sealer keeps no seal")
	require.True(t, rotating.Current(sealedOf(t, e, after.ID)), "new keys are sealed under the current key")
	require.False(t, rotating.Current(sealedOf(t, e, before.ID)))
	got, err := rotating.Open(before.ID, sealedOf(t, e, before.ID))
	require.NoError(t, err, "the previous key opens its seals")
	require.Equal(t, beforeSecret, got)
	_, err = newSealer(t, newKey).Open(before.ID, sealedOf(t, e, before.ID))
	var se *store.KeySealError
	require.ErrorAs(t, err, &se, "without the previous key, an old seal does not open")
	require.Equal(t, oldSealer.Fingerprint(), se.Fingerprint, "the error names the key that sealed it")

	resealed, unopened, err := store.KeySealRotate(e.ctx, e.pool, rotating)
	require.NoError(t, err)
	require.Equal(t, 1, resealed)
	require.Zero(t, unopened)
	resealed, unopened, err = store.KeySealRotate(e.ctx, e.pool, rotating)
	require.NoError(t, err)
	require.Zero(t, resealed+unopened, "nothing left to reseal")

	only := newSealer(t, newKey)
	for id, want := range map[int64]string{before.ID: beforeSecret, after.ID: afterSecret} {
		got, err := only.Open(id, sealedOf(t, e, id))
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	require.Nil(t, sealedOf(t, e, plain.ID), "a key without a seal stays without")

	// A seal no configured key opens is counted, and left alone.
	stranger := newSealer(t, newSealKey(t))
	resealed, unopened, err = store.KeySealRotate(e.ctx, e.pool, stranger)
	require.NoError(t, err)
	require.Equal(t, 0, resealed)
	require.Equal(t, 2, unopened)
}

// A server key is 32 bytes in base64; anything else is refused with a
// message that says how to make one.
func TestParseKeySealKey(t *testing.T) {
	t.Parallel()
	good := base64.StdEncoding.EncodeToString(newSealKey(t))
	for _, text := range []string{good, " " + good + "\n"} {
		k, err := store.ParseKeySealKey(text)
		require.NoError(t, err)
		require.Len(t, k, 32)
	}
	for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString(make([]byte, 16)),
		base64.StdEncoding.EncodeToString(make([]byte, 33)), good[:len(good)-4]} {
		_, err := store.ParseKeySealKey(bad)
		require.ErrorContains(t, err, "openssl rand -base64 32", "%q", bad)
	}
	_, err := store.NewKeySealer(make([]byte, 16))
	require.Error(t, err)
	_, err = store.NewKeySealer(newSealKey(t), make([]byte, 31))
	require.Error(t, err)
}
