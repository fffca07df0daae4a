package store

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Sealed secrets (ferry.api_keys.sealed_secret): what SigV4 verification
// needs, a key's secret itself, kept so that a dump of the database alone
// does not yield it. A seal is
//
//	version (1 byte, 1) | fingerprint (8) | nonce (12) | AES-256-GCM(secret)
//
// under a server key from the environment (FERRY_SECRET_KEY), the nonce
// random, the key's id and the seal's first 9 bytes its associated data:
// a seal copied to another row, or with its fingerprint changed, does not
// open. The fingerprint names the server key that sealed it (an HMAC of a
// fixed text under that key: it tells nothing of the key), so that a
// [KeySealer] with a previous server key opens what that key sealed, and
// [KeySealRotate] finds the seals to redo.

// KeySealKeyBytes is the size of a server key: AES-256.
const KeySealKeyBytes = 32

const (
	keySealVersion     byte = 1
	keySealFingerprint      = 8
	keySealHeader           = 1 + keySealFingerprint
)

// ErrKeyUnsealed means a key has no sealed secret: made before Ferry kept
// them, or while no server key was configured. It works over REST, not
// over SQS.
var ErrKeyUnsealed = errors.New("api key has no sealed secret")

// KeySealError is a seal that the configured server keys do not open:
// sealed under another server key (Fingerprint, "" if the seal is not one
// Ferry wrote), or altered.
type KeySealError struct {
	Fingerprint string
	Reason      string
}

func (e *KeySealError) Error() string {
	if e.Fingerprint == "" {
		return "api key sealed secret: " + e.Reason
	}
	return "api key sealed secret (server key " + e.Fingerprint + "): " + e.Reason
}

// KeySealer seals and opens the secrets of API keys: it seals under the
// current server key and opens what it or a previous one sealed.
type KeySealer struct {
	current  sealKey
	previous []sealKey
}

type sealKey struct {
	fingerprint [keySealFingerprint]byte
	aead        cipher.AEAD
}

// ParseKeySealKey reads a server key as configured: 32 bytes in standard
// base64 (`openssl rand -base64 32`), surrounding spaces ignored.
func ParseKeySealKey(text string) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil {
		return nil, errors.New("is not base64 (make one with `openssl rand -base64 32`)")
	}
	if len(raw) != KeySealKeyBytes {
		return nil, fmt.Errorf("is %d bytes, not %d (make one with `openssl rand -base64 32`)", len(raw), KeySealKeyBytes)
	}
	return raw, nil
}

// NewKeySealer seals under current and opens what current or any of
// previous sealed; each is [KeySealKeyBytes] long.
func NewKeySealer(current []byte, previous ...[]byte) (*KeySealer, error) {
	c, err := newSealKey(current)
	if err != nil {
		return nil, err
	}
	s := &KeySealer{current: c}
	for _, p := range previous {
		k, err := newSealKey(p)
		if err != nil {
			return nil, err
		}
		s.previous = append(s.previous, k)
	}
	return s, nil
}

func newSealKey(key []byte) (sealKey, error) {
	if len(key) != KeySealKeyBytes {
		return sealKey{}, fmt.Errorf("api key seal: a server key is %d bytes, not %d", KeySealKeyBytes, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return sealKey{}, fmt.Errorf("api key seal: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return sealKey{}, fmt.Errorf("api key seal: %w", err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("ferry api key seal fingerprint"))
	k := sealKey{aead: aead}
	copy(k.fingerprint[:], m.Sum(nil))
	return k, nil
}

// Fingerprint names the current server key (16 hex digits, as
// [KeySealError] shows them): what the log shows at start.
func (s *KeySealer) Fingerprint() string { return hex.EncodeToString(s.current.fingerprint[:]) }

// keySealAD is the associated data of the seal of key id: the seal's
// header and the id.
func keySealAD(header []byte, id int64) []byte {
	return strconv.AppendInt(append(append([]byte{}, header...), "ferry.api_keys.id="...), id, 10)
}

// Seal seals the secret of key id under the current server key.
func (s *KeySealer) Seal(id int64, secret string) []byte {
	k := s.current
	out := make([]byte, keySealHeader, keySealHeader+k.aead.NonceSize()+len(secret)+k.aead.Overhead())
	out[0] = keySealVersion
	copy(out[1:keySealHeader], k.fingerprint[:])
	nonce := make([]byte, k.aead.NonceSize())
	_, _ = rand.Read(nonce)
	out = append(out, nonce...)
	return k.aead.Seal(out, nonce, []byte(secret), keySealAD(out[:keySealHeader], id))
}

// Current reports whether sealed was sealed under the current server key.
func (s *KeySealer) Current(sealed []byte) bool {
	return len(sealed) > keySealHeader && hmac.Equal(sealed[:keySealHeader], s.header())
}

// Open returns the secret of key id that sealed holds: a [*KeySealError]
// if no configured server key sealed it, or it does not open (altered, or
// another key's).
func (s *KeySealer) Open(id int64, sealed []byte) (string, error) {
	if len(sealed) < keySealHeader || sealed[0] != keySealVersion {
		return "", &KeySealError{Reason: "not a seal Ferry wrote"}
	}
	fp := sealed[1:keySealHeader]
	k, ok := s.sealedBy(fp)
	if !ok {
		return "", &KeySealError{Fingerprint: hex.EncodeToString(fp),
			Reason: "sealed under a server key that is not configured (FERRY_SECRET_KEY, FERRY_SECRET_KEY_PREVIOUS)"}
	}
	rest := sealed[keySealHeader:]
	if len(rest) >= k.aead.NonceSize()+k.aead.Overhead() {
		nonce, box := rest[:k.aead.NonceSize()], rest[k.aead.NonceSize():]
		secret, err := k.aead.Open(nil, nonce, box, keySealAD(sealed[:keySealHeader], id))
		if err == nil {
			return string(secret), nil
		}
	}
	return "", &KeySealError{Fingerprint: hex.EncodeToString(fp), Reason: "does not open: altered, or another key's"}
}

// sealedBy is the configured server key whose fingerprint is fp.
func (s *KeySealer) sealedBy(fp []byte) (sealKey, bool) {
	if hmac.Equal(fp, s.current.fingerprint[:]) {
		return s.current, true
	}
	for _, k := range s.previous {
		if hmac.Equal(fp, k.fingerprint[:]) {
			return k, true
		}
	}
	return sealKey{}, false
}

// keySealRotateBatch is how many seals [KeySealRotate] reads at a time.
const keySealRotateBatch = 100

// KeySealRotate seals anew under the current server key every sealed
// secret that another (a previous) server key sealed, a batch of
// [keySealRotateBatch] at a time, and returns how many it resealed and how
// many it could not open (left as they are; [KeySealer.Open] says why).
// A seal changed meanwhile (another instance resealing it) is left to
// that one. With every seal current, it reads and writes nothing else:
// one read per start.
func KeySealRotate(ctx context.Context, db DBTX, s *KeySealer) (resealed, unopened int, err error) {
	after := int64(0)
	for {
		rows, err := db.Query(ctx, `/* ferry:api_key_seal_scan */
			SELECT id, sealed_secret FROM ferry.api_keys
			WHERE id > $1 AND sealed_secret IS NOT NULL AND substring(sealed_secret FROM 1 FOR $2) <> $3
			ORDER BY id LIMIT $4`, after, keySealHeader, s.header(), keySealRotateBatch)
		if err != nil {
			return resealed, unopened, interpretError("api key seal rotate", err)
		}
		type seal struct {
			ID     int64
			Sealed []byte
		}
		seals, err := pgx.CollectRows(rows, pgx.RowToStructByPos[seal])
		if err != nil {
			return resealed, unopened, interpretError("api key seal rotate", err)
		}
		for _, old := range seals {
			secret, err := s.Open(old.ID, old.Sealed)
			if err != nil {
				unopened++
				continue
			}
			tag, err := db.Exec(ctx, `/* ferry:api_key_seal_rotate */
				UPDATE ferry.api_keys SET sealed_secret = $2 WHERE id = $1 AND sealed_secret = $3`,
				old.ID, s.Seal(old.ID, secret), old.Sealed)
			if err != nil {
				return resealed, unopened, interpretError("api key seal rotate", err)
			}
			resealed += int(tag.RowsAffected())
		}
		if len(seals) < keySealRotateBatch {
			return resealed, unopened, nil
		}
		after = seals[len(seals)-1].ID
	}
}

// header is the first bytes of every seal under the current server key.
func (s *KeySealer) header() []byte {
	return append([]byte{keySealVersion}, s.current.fingerprint[:]...)
}
