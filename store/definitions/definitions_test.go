package definitions_test

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/migrations"
	"github.com/ferry-mq/ferry/store/definitions"
)

// A change to the definitions is a new generation: generations.sha256
// lists each generation's checksum, and the files must hash to the line
// of definitions.Generation. A database records the generation installed,
// and a binary never installs over a newer one: definitions changed
// without a new generation would not reach a database that holds that
// generation already, and two builds that differ would both claim it.
func TestGenerationBumped(t *testing.T) {
	t.Parallel()
	f, err := os.Open("generations.sha256")
	require.NoError(t, err)
	defer f.Close()
	sums := map[int]string{}
	prev := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		require.Len(t, fields, 2, "generations.sha256: %q", sc.Text())
		gen, err := strconv.Atoi(fields[0])
		require.NoError(t, err, "generations.sha256: %q", sc.Text())
		require.Equal(t, prev+1, gen, "generations.sha256 lists generations 1, 2, 3, ... in order")
		prev = gen
		sums[gen] = fields[1]
	}
	require.NoError(t, sc.Err())
	require.Equal(t, definitions.Generation, prev,
		"generations.sha256 ends at generation %d, the binary's is %d", prev, definitions.Generation)
	require.Equal(t, sums[definitions.Generation], definitions.Checksum(),
		"the definitions changed: bump definitions.Generation and add its line to generations.sha256")
}

// An older binary never overwrites newer definitions: in a rolling deploy
// the instances of the old release keep starting (migrations.Up) after
// the new one installed its generation.
func TestNoDowngrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	conn := connect(t, dbURL)
	newer := definitions.Generation + 1
	_, err := conn.Exec(ctx, `
		CREATE OR REPLACE FUNCTION ferry.receipt_encode(p_id bigint, p_token bigint) RETURNS text
		    LANGUAGE sql IMMUTABLE STRICT AS $$
		    SELECT /* a newer generation */ rtrim(translate(encode(int8send(p_id) || int8send(p_token), 'base64'), '+/', '-_'), '=')
		$$`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE ferry.definitions SET generation = $1, checksum = 'newer'`, newer)
	require.NoError(t, err)
	before := functions(t, conn)

	require.NoError(t, migrations.Up(ctx, dbURL))
	require.Equal(t, before, functions(t, conn), "an older binary changed the functions of a newer generation")
	var gen int
	var sum string
	require.NoError(t, conn.QueryRow(ctx, `SELECT generation, checksum FROM ferry.definitions`).Scan(&gen, &sum))
	require.Equal(t, newer, gen)
	require.Equal(t, "newer", sum)
}

// The binary's definitions replace what the database holds when it holds
// an older generation, or its own with another checksum (a development
// build), and then record the binary's generation and checksum.
func TestInstallReplaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, gen := range map[string]int{"older": definitions.Generation - 1, "same": definitions.Generation} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dbURL := pgtest.NewDatabase(t)
			conn := connect(t, dbURL)
			want := functions(t, conn)
			_, err := conn.Exec(ctx, `CREATE OR REPLACE FUNCTION ferry.max_value_depth() RETURNS integer
				LANGUAGE sql IMMUTABLE AS $$ SELECT 1 $$`)
			require.NoError(t, err)
			_, err = conn.Exec(ctx, `UPDATE ferry.definitions SET generation = $1, checksum = 'other'`, gen)
			require.NoError(t, err)
			require.NotEqual(t, want, functions(t, conn))

			require.NoError(t, migrations.Up(ctx, dbURL))
			require.Equal(t, want, functions(t, conn))
			var got int
			var sum string
			require.NoError(t, conn.QueryRow(ctx, `SELECT generation, checksum FROM ferry.definitions`).Scan(&got, &sum))
			require.Equal(t, definitions.Generation, got)
			require.Equal(t, definitions.Checksum(), sum)
		})
	}
}

// The definitions keep every function an older binary or an application
// calls: each function a database migrated by the migrations alone has
// (the functions of the last release before the definitions) is still
// there after the install, with the same arguments, result, security and
// grants.
func TestSignaturesKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, migratedOnly(t))
	signatures := func() map[string]string {
		return query(t, conn, `
			SELECT p.oid::regprocedure::text, concat_ws(' | ', pg_get_function_arguments(p.oid),
				pg_get_function_result(p.oid), p.prosecdef, p.provolatile,
				-- Planner settings (SET enable_... = off, jit = off) are no
				-- part of a function's contract: its callers see the same results.
				(SELECT array_agg(c) FROM unnest(p.proconfig) c WHERE c NOT LIKE 'enable\_%' AND c <> 'jit=off')::text,
				p.proacl::text)
			FROM pg_proc p WHERE p.pronamespace = 'ferry'::regnamespace AND p.prokind = 'f'`)
	}
	before := signatures()
	require.NotEmpty(t, before)
	require.NoError(t, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		installed, err := definitions.Install(ctx, tx)
		require.True(t, installed)
		return err
	}))
	after := signatures()
	for sig, want := range before {
		require.Contains(t, after, sig, "the definitions lost %s", sig)
		require.Equal(t, want, after[sig], "%s changed its signature, security or grants", sig)
	}
}
