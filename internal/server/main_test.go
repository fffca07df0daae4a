package server_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// execAdmin runs each statement on the cluster's postgres database.
func execAdmin(t *testing.T, c *pgcluster.Cluster, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	for _, s := range stmts {
		_, err = admin.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	require.NoError(t, admin.Close(ctx))
}

// startCluster starts a cluster in dir/pg, logging to the test and
// stopped when it ends, with an empty database ferry.
func startCluster(t *testing.T, dir string) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{DataDir: filepath.Join(dir, "pg"), Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	execAdmin(t, c, "CREATE DATABASE ferry")
	return c
}
