package migrations_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/migrations"
)

// Migration 000010 moves the promotion of a group's next message into
// ferry.message_promote and replaces the engine's functions that called a
// copy of it; its down must leave the functions exactly as 000009 made
// them: every function of the ferry schema, after up to the latest and
// down to 9, has the definition and the grants it has in a database only
// ever migrated up to 9.
func TestMessagePromoteDownRestores000009(t *testing.T) {
	t.Parallel()
	_, down := migratedDownTo(t, 9)
	fresh := migratedUpTo(t, 9)
	want, got := functionDefinitions(t, fresh), functionDefinitions(t, down)
	require.Contains(t, want, "ferry.message_ack(bigint,bigint[],bigint[],boolean)")
	require.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got)), "the functions after 000010's down")
	for _, sig := range slices.Sorted(maps.Keys(want)) {
		require.Equal(t, want[sig], got[sig], "%s after 000010's down", sig)
	}
}

// migratedUpTo migrates a new emptyDatabase up to version v of Ferry's
// migrations (River's are not run) and returns a connection to it, closed
// at cleanup.
func migratedUpTo(t *testing.T, v uint) *pgx.Conn {
	t.Helper()
	dbURL := emptyDatabase(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	src, err := iofs.New(migrations.Files(), ".")
	require.NoError(t, err)
	drv, err := migratepgx.WithInstance(db, &migratepgx.Config{MigrationsTable: "ferry_schema_migrations"})
	require.NoError(t, err)
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	require.NoError(t, err)
	require.NoError(t, m.Migrate(v))
	srcErr, dbErr := m.Close()
	require.NoError(t, srcErr)
	require.NoError(t, dbErr)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// functionDefinitions is every function of the ferry schema: its
// signature → its definition and grants.
func functionDefinitions(t *testing.T, conn *pgx.Conn) map[string]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) || coalesce(p.proacl::text, '')
		FROM pg_proc p WHERE p.pronamespace = 'ferry'::regnamespace AND p.prokind IN ('f', 'p')`)
	require.NoError(t, err)
	defs := map[string]string{}
	for rows.Next() {
		var sig, def string
		require.NoError(t, rows.Scan(&sig, &def))
		defs[sig] = def
	}
	require.NoError(t, rows.Err())
	return defs
}
