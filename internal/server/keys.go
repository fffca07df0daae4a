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
	"github.com/ferry-mq/ferry/store"
)

// keyStore resolves the scoped keys of the database (POST /v1/keys) from
// the key cache: no database read per request once a key has been seen
// (nor, for a few seconds, once a secret was found to be no key's), and a
// key deleted on any instance is forgotten here when its NOTIFY is heard,
// as are the unknown secrets when a key is created.
type keyStore struct{ cache *store.KeyCache[access.Key] }

// newKeyStore makes the key store of pool, told of deletes by n.
func newKeyStore(ctx context.Context, pool *pgxpool.Pool, n *store.Notifier) (keyStore, error) {
	c, err := store.NewKeyCache(ctx, pool, n, loadKey)
	if err != nil {
		return keyStore{}, fmt.Errorf("api keys: %w", err)
	}
	return keyStore{cache: c}, nil
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
