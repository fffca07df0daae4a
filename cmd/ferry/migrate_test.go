package main

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgtest"
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
	require.Contains(t, migrate("down"), "schema version "+itoa(latest-1))
	require.Contains(t, migrate("up"), "schema version "+itoa(latest)+" (latest")

	var out, errOut bytes.Buffer
	require.Error(t, run(ctx, []string{"migrate", "sideways"}, &out, &errOut))
	require.Error(t, run(ctx, []string{"migrate"}, &out, &errOut))
	t.Setenv("FERRY_DATABASE_URL", "")
	err = run(ctx, []string{"migrate", "version"}, &out, &errOut)
	require.ErrorContains(t, err, "FERRY_DATABASE_URL")
}

func itoa(v uint) string { return strconv.FormatUint(uint64(v), 10) }
