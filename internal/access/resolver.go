package access

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
)

// ErrInvalidKey is what a [Resolver] answers for a secret that is no
// working key (unknown, revoked or expired): the request is a 401. Any
// other error is the resolver's own failure (e.g. the database), not the
// client's.
var ErrInvalidKey = errors.New("access: the API key is not valid")

// Resolver turns the secret of a Bearer token into its [Key].
type Resolver interface {
	Resolve(ctx context.Context, secret string) (Key, error)
}

// AdminKeyID is the ID of the bootstrap admin key.
const AdminKeyID = "admin"

// adminKey resolves the bootstrap admin key only.
type adminKey struct{ digest [sha256.Size]byte }

// NewAdminKey returns the resolver of the bootstrap key secret, which has
// every permission. Secrets are compared as SHA-256 digests in constant
// time, so neither content nor length leaks. An empty secret resolves
// nothing.
func NewAdminKey(secret string) Resolver {
	if secret == "" {
		return Chain()
	}
	return adminKey{digest: sha256.Sum256([]byte(secret))}
}

func (a adminKey) Resolve(_ context.Context, secret string) (Key, error) {
	got := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(got[:], a.digest[:]) != 1 {
		return Key{}, ErrInvalidKey
	}
	return Key{ID: AdminKeyID, Name: "FERRY_ADMIN_KEY", Admin: true}, nil
}

// chain asks its resolvers in turn.
type chain []Resolver

// Chain returns a resolver that asks each of rs in turn and answers the
// first one that does not say [ErrInvalidKey] (e.g. the admin key, then the
// key store); with none, every secret is invalid.
func Chain(rs ...Resolver) Resolver { return chain(rs) }

func (c chain) Resolve(ctx context.Context, secret string) (Key, error) {
	for _, r := range c {
		k, err := r.Resolve(ctx, secret)
		if !errors.Is(err, ErrInvalidKey) {
			return k, err
		}
	}
	return Key{}, ErrInvalidKey
}
