package migrations_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/migrations"
	"github.com/ferry-mq/ferry/store/definitions"
)

// Every down migration leaves the functions as the migrations before it
// made them: after up to the latest and down one step at a time, at each
// version every function of the ferry schema has the definition and the
// grants it has in a database only ever migrated up to that version (a
// down that forgot a function, or restored an older text of one, shows),
// with the definitions installed where that version keeps them
// (ferry.definitions exists), as [migrations.Up] installs them.
func TestDownRestoresFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	versions := upVersions(t) // not v-1: numbers may have gaps
	dbURL, down := migratedDownTo(t, versions[len(versions)-1])
	for i := len(versions) - 2; i >= 0; i-- {
		v := versions[i]
		require.NoError(t, migrations.Down(ctx, dbURL))
		want, got := functionDefinitions(t, withDefinitions(t, migratedUpTo(t, v))), functionDefinitions(t, down)
		require.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got)), "the functions after the down to %d", v)
		for _, sig := range slices.Sorted(maps.Keys(want)) {
			require.Equal(t, want[sig], got[sig], "%s after the down to %d", sig, v)
		}
	}
}

// migratedUpTo migrates a new emptyDatabase up to version v of Ferry's
// migrations (River's are not run) and returns a connection to it, closed
// at cleanup.
func migratedUpTo(t *testing.T, v uint) *pgx.Conn {
	t.Helper()
	dbURL := emptyDatabase(t)
	ctx := context.Background()
	require.NoError(t, migrations.To(ctx, dbURL, v))
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// withDefinitions installs the definitions in conn's database when its
// schema records them (ferry.definitions exists), as [migrations.Up] does.
func withDefinitions(t *testing.T, conn *pgx.Conn) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	var kept bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass('ferry.definitions') IS NOT NULL`).Scan(&kept))
	if !kept {
		return conn
	}
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = definitions.Install(ctx, tx)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
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
