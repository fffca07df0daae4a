package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/sigv4"
	"github.com/ferry-mq/ferry/store"
)

// keyStore resolves the scoped keys of the database (POST /v1/keys) from
// the key cache: no database read per request once a key has been seen
// (nor, for a few seconds, once a secret was found to be no key's), and a
// key deleted on any instance is forgotten here when its NOTIFY is heard,
// as are the unknown secrets when a key is created. It finds keys by
// their secret (Bearer) and by their id ([keyStore.SQSKey]), whose sealed
// secret sealer opens (nil: none is configured).
type keyStore struct {
	cache  *store.KeyCache[access.Key]
	sealer *store.KeySealer
	log    *slog.Logger
}

// newKeyStore makes the key store of pool, told of deletes by n.
func newKeyStore(ctx context.Context, pool *pgxpool.Pool, n *store.Notifier, sealer *store.KeySealer, log *slog.Logger) (keyStore, error) {
	c, err := store.NewKeyCache(ctx, pool, n, loadKey)
	if err != nil {
		return keyStore{}, fmt.Errorf("api keys: %w", err)
	}
	return keyStore{cache: c, sealer: sealer, log: log}, nil
}

// SQSKey answers an access key id of the SQS face (SigV4): the key's
// secret and the key, whose permissions apply as on REST. An id that is
// no working key (unknown, revoked, expired) is [sigv4.ErrUnknownKey], as
// is a key whose secret Ferry cannot give: one with no sealed secret (made
// before Ferry kept them, or without FERRY_SECRET_KEY), or sealed under a
// server key not configured; those are logged, since the key works over
// REST. Any other error is the server's. The bootstrap key (id admin) is
// not the store's: the SQS face answers it.
func (k keyStore) SQSKey(ctx context.Context, accessKeyID string) (string, access.Key, error) {
	key, sealed, err := k.cache.ResolveID(ctx, accessKeyID)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrKeyExpired) {
		return "", access.Key{}, sigv4.ErrUnknownKey
	}
	if err != nil {
		return "", access.Key{}, err
	}
	id, _ := store.ParseKeyID(accessKeyID)
	var secret string
	switch {
	case sealed == nil:
		err = store.ErrKeyUnsealed
	case k.sealer == nil:
		err = errors.New("api key sealed secret: FERRY_SECRET_KEY is not set")
	default:
		secret, err = k.sealer.Open(id, sealed)
	}
	if err != nil {
		k.log.Warn("SQS access key refused: its secret is not available (it works over REST; see docs/keys.md)",
			"key_id", accessKeyID, "error", err)
		return "", access.Key{}, sigv4.ErrUnknownKey
	}
	return secret, key, nil
}

// Resolve answers the key of secret: access.ErrInvalidKey (a 401) for a
// secret no key has (unknown, deleted) or an expired key's.
func (k keyStore) Resolve(ctx context.Context, secret string) (access.Key, error) {
	key, err := k.cache.Resolve(ctx, secret)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrKeyExpired) {
		return access.Key{}, access.ErrInvalidKey
	}
	return key, err
}

// loadKey turns a stored key into what a request checks: its permissions
// parsed once, when the key is loaded. A stored list that does not parse
// (it was validated when the key was made) is an error, not a key with
// fewer permissions.
func loadKey(k store.APIKey) (access.Key, error) {
	var specs []access.Spec
	if err := json.Unmarshal(k.Permissions, &specs); err != nil {
		return access.Key{}, fmt.Errorf("api key %s: stored permissions: %w", store.FormatKeyID(k.ID), err)
	}
	grants, err := access.Parse(specs)
	if err != nil {
		return access.Key{}, fmt.Errorf("api key %s: stored permissions: %w", store.FormatKeyID(k.ID), err)
	}
	key := access.Key{ID: store.FormatKeyID(k.ID), Name: k.Name, Grants: grants}
	if k.ExpiresAt != nil {
		key.ExpiresAt = *k.ExpiresAt
	}
	return key, nil
}

// flushFinalTimeout bounds the last write of key uses at shutdown.
const flushFinalTimeout = 5 * time.Second

// flushKeyUses writes the keys' recorded uses (last_used_at) every
// `every` until ctx ends, and once more then, so that the uses of this
// instance's last minute are not lost at shutdown.
func (k keyStore) flushKeyUses(ctx context.Context, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := k.cache.Flush(ctx); err != nil && ctx.Err() == nil {
				log.Warn("api key uses not written; retried at the next flush", "error", err)
			}
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.Background(), flushFinalTimeout)
			defer cancel()
			if err := k.cache.Flush(final); err != nil {
				log.Warn("api key uses not written at shutdown", "error", err)
			}
			return
		}
	}
}

// SQSKey answers an access key id of the SQS face from the database's
// keys: the shape of handlers/sqs's KeyFunc; see [keyStore.SQSKey].
func (s *Server) SQSKey(ctx context.Context, accessKeyID string) (string, access.Key, error) {
	return s.keys.SQSKey(ctx, accessKeyID)
}

// sealKeys says at start whether the secrets of new keys are sealed (and
// under which server key), and reseals under the current server key the
// secrets a previous one sealed ([store.KeySealRotate]). Neither stops
// the start: without a server key, keys work over REST.
func (s *Server) sealKeys(ctx context.Context, sealer *store.KeySealer) {
	log := s.log.With("component", "keys")
	if sealer == nil {
		log.Warn("FERRY_SECRET_KEY is not set: API keys made now keep no sealed secret, so SQS signatures work only for the access key id admin (see docs/keys.md)")
		return
	}
	resealed, unopened, err := store.KeySealRotate(ctx, s.pool, sealer)
	log.Info("API key secrets are sealed", "server_key", sealer.Fingerprint(), "resealed", resealed)
	if err != nil {
		log.Warn("API key secrets not all resealed under the current server key; retried at the next start", "error", err)
	}
	if unopened > 0 {
		log.Warn("API key secrets sealed under a server key that is not configured: those keys work over REST, not over SQS (see docs/keys.md)", "keys", unopened)
	}
}

// KeyByID answers the key of a console session's id, through the key
// cache (so a revoked key is gone within a second, as for REST): the
// bootstrap key for access.AdminKeyID; access.ErrInvalidKey for an id
// that is no working key (unknown, revoked, expired).
func (k keyStore) KeyByID(adminKey string) func(ctx context.Context, id string) (access.Key, error) {
	return func(ctx context.Context, id string) (access.Key, error) {
		if id == access.AdminKeyID {
			if adminKey == "" {
				return access.Key{}, access.ErrInvalidKey
			}
			return access.Key{ID: access.AdminKeyID, Name: "FERRY_ADMIN_KEY", Admin: true}, nil
		}
		key, _, err := k.cache.ResolveID(ctx, id)
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrKeyExpired) {
			return access.Key{}, access.ErrInvalidKey
		}
		return key, err
	}
}
