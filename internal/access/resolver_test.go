package access_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/access"
)

func TestResolvers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := access.NewAdminKey("the-admin-secret-0123")
	k, err := r.Resolve(ctx, "the-admin-secret-0123")
	require.NoError(t, err)
	require.True(t, k.Admin)
	require.Equal(t, access.AdminKeyID, k.ID)
	for _, s := range []string{"", "the-admin-secret-012", "the-admin-secret-01234", "THE-ADMIN-SECRET-0123"} {
		_, err = r.Resolve(ctx, s)
		require.ErrorIs(t, err, access.ErrInvalidKey, "%q", s)
	}
	_, err = access.NewAdminKey("").Resolve(ctx, "")
	require.ErrorIs(t, err, access.ErrInvalidKey, "no admin key configured: nothing resolves")

	boom := errors.New("database down")
	c := access.Chain(r, resolverFunc(func(s string) (access.Key, error) {
		if s == "scoped" {
			return access.Key{ID: "k2"}, nil
		}
		if s == "broken" {
			return access.Key{}, boom
		}
		return access.Key{}, access.ErrInvalidKey
	}))
	k, err = c.Resolve(ctx, "scoped")
	require.NoError(t, err)
	require.Equal(t, "k2", k.ID)
	k, err = c.Resolve(ctx, "the-admin-secret-0123")
	require.NoError(t, err)
	require.True(t, k.Admin)
	_, err = c.Resolve(ctx, "broken")
	require.ErrorIs(t, err, boom)
	_, err = c.Resolve(ctx, "nobody")
	require.ErrorIs(t, err, access.ErrInvalidKey)
}

type resolverFunc func(string) (access.Key, error)

func (f resolverFunc) Resolve(_ context.Context, s string) (access.Key, error) { return f(s) }
