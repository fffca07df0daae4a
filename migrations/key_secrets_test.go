package migrations_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/migrations"
	"github.com/ferry-mq/ferry/store"
)

// upVersions is the version of every migration, in order.
func upVersions(t *testing.T) []uint {
	t.Helper()
	ups, err := fs.Glob(migrations.Files(), "*.up.sql")
	require.NoError(t, err)
	var versions []uint
	for _, name := range ups { // in name order: version order
		v, err := strconv.ParseUint(name[:strings.IndexByte(name, '_')], 10, 64)
		require.NoError(t, err)
		versions = append(versions, uint(v))
	}
	return versions
}

// versionBefore is the version of the migration that precedes the one
// whose up file ends in suffix.
func versionBefore(t *testing.T, suffix string) uint {
	t.Helper()
	ups, err := fs.Glob(migrations.Files(), "*.up.sql")
	require.NoError(t, err)
	for i, name := range ups {
		if strings.HasSuffix(name, suffix) {
			require.Positive(t, i)
			return upVersions(t)[i-1]
		}
	}
	t.Fatalf("no migration %s", suffix)
	return 0
}

// A key made by the release before sealed secrets (its row as that
// release wrote it: the hash only) keeps working over REST once the
// migration has run, and has no sealed secret (it cannot be used over
// SQS: docs/keys.md says how to replace it).
func TestKeyFromBeforeSealedSecretsStillWorks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := migratedUpTo(t, versionBefore(t, "_key_secrets.up.sql"))
	h, err := store.NewKeyHasher(ctx, conn)
	require.NoError(t, err)
	secret := store.NewKeySecret()
	var id int64
	require.NoError(t, conn.QueryRow(ctx, `INSERT INTO ferry.api_keys (name, secret_hash, permissions) VALUES ($1, $2, $3) RETURNING id`,
		"old", h.Hash(secret), json.RawMessage(`[{"resource": "queue:*", "actions": ["send"]}]`)).Scan(&id))

	dbURL := conn.Config().ConnString()
	require.NoError(t, migrations.Up(ctx, dbURL))
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	c, err := store.NewKeyCache(ctx, pool, nil, func(k store.APIKey) (store.APIKey, error) { return k, nil })
	require.NoError(t, err)
	k, err := c.Resolve(ctx, secret)
	require.NoError(t, err, "the old key still authenticates")
	require.Equal(t, id, k.ID)
	require.JSONEq(t, `[{"resource": "queue:*", "actions": ["send"]}]`, string(k.Permissions))
	k, sealed, err := c.ResolveID(ctx, store.FormatKeyID(id))
	require.NoError(t, err)
	require.Equal(t, "old", k.Name)
	require.Nil(t, sealed, "no secret can be recovered from a hash")
}
