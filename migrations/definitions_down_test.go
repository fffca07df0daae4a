package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/migrations"
)

// The down of 000012 puts back the functions the migrations made, with
// their grants, whatever definitions were installed since: here ones of a
// later generation that added a function, changed a function's text and
// granted and revoked rights (which no generation has done yet).
func TestDefinitionsDownRestoresMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, conn := migratedDownTo(t, 12)
	_, err := conn.Exec(ctx, `
		CREATE FUNCTION ferry.added_by_definitions() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$;
		CREATE OR REPLACE FUNCTION ferry.max_value_depth() RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT 5 $$;
		GRANT EXECUTE ON FUNCTION ferry.receipt_encode(bigint, bigint) TO ferry_consumer;
		REVOKE ALL ON FUNCTION ferry.receive(text, integer, integer) FROM ferry_consumer;
		REVOKE ALL ON FUNCTION ferry.count_slot() FROM PUBLIC;`)
	require.NoError(t, err)
	require.NoError(t, migrations.Down(ctx, dbURL))
	v, dirty, err := migrations.Version(ctx, dbURL)
	require.NoError(t, err)
	require.Equal(t, uint(11), v)
	require.False(t, dirty)

	want, got := functionDefinitions(t, migratedUpTo(t, 11)), functionDefinitions(t, conn)
	require.NotContains(t, got, "ferry.added_by_definitions()")
	for _, sig := range []string{"ferry.max_value_depth()", "ferry.receipt_encode(bigint,bigint)", "ferry.receive(text,integer,integer)"} {
		require.Equal(t, want[sig], got[sig], sig)
	}
	require.Equal(t, len(want), len(got))
	// A default (NULL) grant comes back as its explicit equivalent.
	var public bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT has_function_privilege('ferry_producer', 'ferry.count_slot()', 'EXECUTE')`).Scan(&public))
	require.True(t, public, "count_slot is executable by anyone again")
	var tables int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_class
		WHERE relnamespace = 'ferry'::regnamespace AND relname IN ('definitions', 'definitions_baseline')`).Scan(&tables))
	require.Zero(t, tables)
}
