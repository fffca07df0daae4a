package store

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// API keys (ferry.api_keys, API.md § Access control). The store makes
// the secret, keeps only its keyed hash, and finds a key by the hash of
// the secret a request presents. What a key may do (its permissions) is
// internal/access's to parse and check; here it is opaque JSON.

// KeySecretPrefix starts every secret Ferry makes, so that secret
// scanners (GitHub's, gitleaks, trufflehog) can find leaked keys.
const KeySecretPrefix = "ferry_sk_"

// keySecretBytes is the secret's randomness: 256 bits.
const keySecretBytes = 32

// KeysWakeKey is the [Notifier] payload that tells every instance that a
// key was deleted: their key caches recheck the keys they hold (any
// database login can send it too, so it is a hint, never trusted as
// such). It is no queue's, topic's or push target's id.
const KeysWakeKey int64 = math.MinInt64 + 1

// KeyCreatedWakeKey is the [Notifier] payload that tells every instance
// that a key was created: their key caches must forget the secrets they
// found no key for (not the keys they know, which a new key leaves as
// they are). Like [KeysWakeKey], it is no queue's, topic's or push
// target's id.
const KeyCreatedWakeKey int64 = math.MinInt64 + 3

// APIKey is a stored API key (never its secret).
type APIKey struct {
	ID          int64
	Name        string
	Permissions json.RawMessage
	CreatedAt   time.Time
	ExpiresAt   *time.Time
	LastUsedAt  *time.Time
}

// FormatKeyID is the id clients see; [ParseKeyID] reverses it.
func FormatKeyID(id int64) string { return "key_" + strconv.FormatInt(id, 10) }

// ParseKeyID parses an id [FormatKeyID] made; ok is false for anything
// else (never a match for a string Ferry did not issue).
func ParseKeyID(s string) (id int64, ok bool) {
	digits, found := strings.CutPrefix(s, "key_")
	if !found || digits == "" || digits[0] == '0' || len(digits) > 19 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	return id, err == nil
}

// NewKeySecret makes a secret: the prefix, 32 random bytes in base62 (43
// characters) and a 6-character base62 CRC-32 of them, which lets a
// scanner tell a real Ferry secret from a look-alike without asking Ferry.
func NewKeySecret() string {
	var b [keySecretBytes]byte
	_, _ = rand.Read(b[:])
	body := base62(new(big.Int).SetBytes(b[:]), 43)
	return KeySecretPrefix + body + keyChecksum(body)
}

// WellFormedKeySecret reports whether s has the shape [NewKeySecret] gives
// it, checksum included: anything else is refused without a lookup.
func WellFormedKeySecret(s string) bool {
	body, ok := strings.CutPrefix(s, KeySecretPrefix)
	if !ok || len(body) != 43+6 {
		return false
	}
	for _, c := range body {
		if !strings.ContainsRune(base62Digits, c) {
			return false
		}
	}
	return keyChecksum(body[:43]) == body[43:]
}

const base62Digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// base62 writes n in base 62, left-padded with '0' to width.
func base62(n *big.Int, width int) string {
	out := make([]byte, 0, width)
	base, mod := big.NewInt(62), new(big.Int)
	n = new(big.Int).Set(n)
	for n.Sign() > 0 {
		n.DivMod(n, base, mod)
		out = append(out, base62Digits[mod.Int64()])
	}
	for len(out) < width {
		out = append(out, '0')
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return string(out)
}

func keyChecksum(body string) string {
	return base62(big.NewInt(int64(crc32.ChecksumIEEE([]byte(body)))), 6)
}

// KeyHasher computes the keyed hash of secrets under this database's
// key (ferry.api_key_settings), read once.
type KeyHasher struct{ key []byte }

// NewKeyHasher reads the database's key-hash key.
func NewKeyHasher(ctx context.Context, db DBTX) (*KeyHasher, error) {
	var key []byte
	err := db.QueryRow(ctx, `/* ferry:api_key_hash_key */ SELECT key_hash_key FROM ferry.api_key_settings`).Scan(&key)
	if err != nil {
		return nil, interpretError("api key hash key", err)
	}
	return &KeyHasher{key: key}, nil
}

// Hash is the stored form of secret: HMAC-SHA256 under the database's key.
func (h *KeyHasher) Hash(secret string) []byte {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(secret))
	return m.Sum(nil)
}

// KeyCreateParams is a new key: its name, its permissions (validated by
// the caller), when it expires (nil: never), and the sealer of its
// secret (nil: none is kept, and the key works over REST only).
type KeyCreateParams struct {
	Name        string
	Permissions json.RawMessage
	ExpiresAt   *time.Time
	Sealer      *KeySealer
}

const apiKeyColumns = `id, name, permissions, created_at, expires_at, last_used_at`

func scanAPIKey(row pgx.Row) (APIKey, error) {
	var k APIKey
	err := row.Scan(&k.ID, &k.Name, &k.Permissions, &k.CreatedAt, &k.ExpiresAt, &k.LastUsedAt)
	return k, err
}

// KeyCreate stores a new key and returns it with its secret, which
// exists nowhere else: the caller shows it once. Every instance is told
// ([KeyCreatedWakeKey]) when it commits.
func KeyCreate(ctx context.Context, db DBTX, h *KeyHasher, p KeyCreateParams) (APIKey, string, error) {
	secret := NewKeySecret()
	k, err := keyCreate(ctx, db, h, p, secret)
	return k, secret, err
}

// keyCreate stores a new key whose secret is secret, and tells every
// instance (a NOTIFY of KeyCreatedWakeKey in the same transaction, so it
// is heard exactly when the key exists): their caches forget the secrets
// they found no key for, this one's perhaps among them. A sealed secret
// is bound to the key's id, so the id is taken first (a failure after it
// wastes one value of the sequence).
func keyCreate(ctx context.Context, db DBTX, h *KeyHasher, p KeyCreateParams, secret string) (APIKey, error) {
	var id *int64
	var sealed []byte
	if p.Sealer != nil {
		var next int64
		err := db.QueryRow(ctx, `/* ferry:api_key_next_id */
			SELECT nextval(pg_get_serial_sequence('ferry.api_keys', 'id'))`).Scan(&next)
		if err != nil {
			return APIKey{}, interpretError("api key create", err)
		}
		id, sealed = &next, p.Sealer.Seal(next, secret)
	}
	k, err := scanAPIKey(db.QueryRow(ctx, `/* ferry:api_key_create */
		WITH made AS (
			INSERT INTO ferry.api_keys (id, name, secret_hash, permissions, expires_at, sealed_secret)
			OVERRIDING SYSTEM VALUE
			VALUES (coalesce($1, nextval(pg_get_serial_sequence('ferry.api_keys', 'id'))), $2, $3, $4, $5, $6)
			RETURNING `+apiKeyColumns+`)
		SELECT made.* FROM made, pg_notify($7, $8) AS told`,
		id, p.Name, h.Hash(secret), p.Permissions, p.ExpiresAt, sealed, notifyChannel, strconv.FormatInt(KeyCreatedWakeKey, 10)))
	if err != nil {
		return APIKey{}, interpretError("api key create", err)
	}
	return k, nil
}

// KeyGet returns one key; [ErrNotFound] if there is none.
func KeyGet(ctx context.Context, db DBTX, id int64) (APIKey, error) {
	k, err := scanAPIKey(db.QueryRow(ctx, `/* ferry:api_key_get */ SELECT `+apiKeyColumns+` FROM ferry.api_keys WHERE id = $1`, id))
	return k, interpretError("api key get", err)
}

// KeyList returns one page of keys in id order, after the id p.After
// (FormatKeyID's form; "" from the first), and whether more follow.
func KeyList(ctx context.Context, db DBTX, p PageParams) ([]APIKey, bool, error) {
	after := int64(0)
	if p.After != "" {
		id, ok := ParseKeyID(p.After)
		if !ok {
			return nil, false, &ValidationError{Field: "after", Message: "is not a cursor Ferry issued"}
		}
		after = id
	}
	rows, err := db.Query(ctx, `/* ferry:api_key_list */
		SELECT `+apiKeyColumns+` FROM ferry.api_keys WHERE id > $1 ORDER BY id LIMIT $2`, after, pageLimit(p.Limit))
	return pageCollect(rows, err, "api key list", p.Limit, func(row pgx.CollectableRow) (APIKey, error) { return scanAPIKey(row) })
}

// KeyLookup finds the key whose secret hashes to hash, whether or not it
// has expired (the caller decides); [ErrNotFound] if none does.
func KeyLookup(ctx context.Context, db DBTX, hash []byte) (APIKey, error) {
	k, err := scanAPIKey(db.QueryRow(ctx, `/* ferry:api_key_lookup */
		SELECT `+apiKeyColumns+` FROM ferry.api_keys WHERE secret_hash = $1`, hash))
	return k, interpretError("api key lookup", err)
}

// KeyGetSealed returns one key and its sealed secret (nil if it has
// none: [ErrKeyUnsealed]'s keys); [ErrNotFound] if there is no such key.
func KeyGetSealed(ctx context.Context, db DBTX, id int64) (APIKey, []byte, error) {
	var k APIKey
	var sealed []byte
	err := db.QueryRow(ctx, `/* ferry:api_key_get_sealed */ SELECT `+apiKeyColumns+`, sealed_secret FROM ferry.api_keys WHERE id = $1`, id).
		Scan(&k.ID, &k.Name, &k.Permissions, &k.CreatedAt, &k.ExpiresAt, &k.LastUsedAt, &sealed)
	if err != nil {
		return APIKey{}, nil, interpretError("api key get", err)
	}
	return k, sealed, nil
}

// KeyExisting reports which of ids are the ids of keys (one read by
// primary key): what a key cache rechecks when it hears that a key was
// deleted.
func KeyExisting(ctx context.Context, db DBTX, ids []int64) (map[int64]bool, error) {
	rows, err := db.Query(ctx, `/* ferry:api_key_existing */ SELECT id FROM ferry.api_keys WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, interpretError("api key recheck", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, interpretError("api key recheck", err)
	}
	live := make(map[int64]bool, len(found))
	for _, id := range found {
		live[id] = true
	}
	return live, nil
}

// KeyDelete deletes a key and tells every instance (a NOTIFY of
// [KeysWakeKey] in the same transaction, so it is heard exactly when the
// delete has committed); [ErrNotFound] if there is none.
func KeyDelete(ctx context.Context, db DBTX, id int64) error {
	var deleted int
	err := db.QueryRow(ctx, `/* ferry:api_key_delete */
		WITH gone AS (DELETE FROM ferry.api_keys WHERE id = $1 RETURNING id)
		SELECT count(*) FROM (SELECT pg_notify($2, $3) FROM gone) AS told`, id, notifyChannel, strconv.FormatInt(KeysWakeKey, 10)).Scan(&deleted)
	if err != nil {
		return interpretError("api key delete", err)
	}
	if deleted == 0 {
		return fmt.Errorf("api key delete: %w", ErrNotFound)
	}
	return nil
}

// KeyUsedEvery is how coarsely last_used_at is kept: [KeyTouch] writes a
// key's only when it is older than this.
const KeyUsedEvery = time.Minute

// KeyTouch records that the keys were used now. One statement for all of
// them, writing only the rows whose last_used_at is older than
// [KeyUsedEvery], so a key in constant use costs one small write a minute.
func KeyTouch(ctx context.Context, db DBTX, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, `/* ferry:api_key_touch */
		UPDATE ferry.api_keys SET last_used_at = now()
		WHERE id = ANY($1) AND (last_used_at IS NULL OR last_used_at < now() - $2 * interval '1 millisecond')`,
		ids, KeyUsedEvery.Milliseconds())
	return interpretError("api key touch", err)
}
