package main

import (
	"bytes"
	"context"
	"io/fs"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// ferry migrate version|down|up drive the schema of FERRY_DATABASE_URL.
func TestMigrateCommand(t *testing.T) {
	dbURL := pgtest.NewDatabase(t) // migrated to the latest version
	t.Setenv("FERRY_DATABASE_URL", dbURL)
	latest, err := migrations.Latest()
	require.NoError(t, err)
	ctx := context.Background()

	migrate := func(args ...string) string {
		var out, errOut bytes.Buffer
		require.NoError(t, run(ctx, append([]string{"migrate"}, args...), &out, &errOut), errOut.String())
		return out.String()
	}
	require.Contains(t, migrate("version"), "schema version "+itoa(latest)+" (latest "+itoa(latest)+")")
	require.Contains(t, migrate("down"), "schema version "+itoa(previousVersion(t)))
	require.Contains(t, migrate("up"), "schema version "+itoa(latest)+" (latest")

	var out, errOut bytes.Buffer
	require.Error(t, run(ctx, []string{"migrate", "sideways"}, &out, &errOut))
	require.Error(t, run(ctx, []string{"migrate"}, &out, &errOut))
	t.Setenv("FERRY_DATABASE_URL", "")
	err = run(ctx, []string{"migrate", "version"}, &out, &errOut)
	require.ErrorContains(t, err, "FERRY_DATABASE_URL")
}

func itoa(v uint) string { return strconv.FormatUint(uint64(v), 10) }

// previousVersion is the version of the migration before the latest (not
// latest-1: numbers may have gaps while branches land).
func previousVersion(t *testing.T) uint {
	t.Helper()
	ups, err := fs.Glob(migrations.Files(), "*.up.sql")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(ups), 2)
	name := ups[len(ups)-2]
	v, err := strconv.ParseUint(name[:strings.IndexByte(name, '_')], 10, 64)
	require.NoError(t, err)
	return uint(v)
}

// With FERRY_DATABASE_DIRECT_URL set (FERRY_DATABASE_URL going through a
// transaction pooler), ferry migrate runs on the direct URL: its advisory
// locks need a session.
func TestMigrateCommandUsesDirectURL(t *testing.T) {
	t.Setenv("FERRY_DATABASE_DIRECT_URL", pgtest.NewDatabase(t))
	// Nothing listens there: a migration over it would fail to connect.
	t.Setenv("FERRY_DATABASE_URL", "postgres://ferry@127.0.0.1:1/ferry?sslmode=disable&connect_timeout=2")
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"migrate", "down"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "schema version "+itoa(previousVersion(t)))
}
