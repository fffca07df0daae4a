package pgcluster

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// startCluster starts a cluster in a fresh temporary directory (or opts's),
// stopped at cleanup.
func startCluster(t *testing.T, opts Options) *Cluster {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(t.TempDir(), "data")
	}
	opts.Logf = t.Logf
	c, err := Start(t.Context(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	return c
}

// query runs a one-value query on the cluster's postgres database.
func query[T any](t *testing.T, c *Cluster, sql string, args ...any) T {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var v T
	require.NoError(t, conn.QueryRow(t.Context(), sql, args...).Scan(&v))
	return v
}

func TestStart(t *testing.T) {
	t.Parallel()

	c := startCluster(t, Options{Settings: map[string]string{"work_mem": "12MB"}})

	require.False(t, c.Reused())
	require.NotZero(t, c.Port())
	require.Equal(t, "postgres://postgres@127.0.0.1:"+strconv.Itoa(c.Port())+"/db?sslmode=disable", c.URL("db"))
	require.Equal(t, "off", query[string](t, c, "SHOW fsync"))
	require.Equal(t, "off", query[string](t, c, "SHOW synchronous_commit"))
	require.Equal(t, "off", query[string](t, c, "SHOW full_page_writes"))
	require.Equal(t, "200", query[string](t, c, "SHOW max_connections"))
	require.Equal(t, "12MB", query[string](t, c, "SHOW work_mem"))
	require.Equal(t, "127.0.0.1", query[string](t, c, "SHOW listen_addresses"))
	require.Equal(t, "UTF8", query[string](t, c, "SHOW server_encoding"))
	require.Equal(t, "postgres", query[string](t, c, "SELECT current_user"))
	require.FileExists(t, filepath.Join(c.DataDir(), ".s.PGSQL."+strconv.Itoa(c.Port())))
	require.FileExists(t, filepath.Join(c.DataDir(), logFile))

	require.NoError(t, c.Stop(t.Context()))
	require.NoError(t, c.Stop(t.Context()), "a second Stop is harmless")
	_, err := pgx.Connect(t.Context(), c.URL("postgres"))
	require.Error(t, err, "the server is down")
}

func TestStartReusesRunningServer(t *testing.T) {
	t.Parallel()

	c := startCluster(t, Options{})

	again, err := Start(t.Context(), Options{DataDir: c.DataDir(), Port: 1, Logf: t.Logf})
	require.NoError(t, err)
	require.True(t, again.Reused())
	require.Equal(t, c.Port(), again.Port(), "the port comes from postmaster.pid, not Options")

	require.NoError(t, again.Stop(t.Context()))
	require.Equal(t, 1, query[int](t, c, "SELECT 1"), "stopping a reused cluster leaves the server running")
}

func TestStartDurableRestartKeepsData(t *testing.T) {
	t.Parallel()

	dataDir := filepath.Join(t.TempDir(), "data")
	c, err := Start(t.Context(), Options{DataDir: dataDir, Durable: true, Logf: t.Logf})
	require.NoError(t, err)
	require.Equal(t, "on", query[string](t, c, "SHOW fsync"))
	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(t.Context(), "CREATE TABLE kept AS SELECT 42 AS v")
	require.NoError(t, err)
	require.NoError(t, conn.Close(t.Context()))
	require.NoError(t, c.Stop(t.Context()))

	c = startCluster(t, Options{DataDir: dataDir, Durable: true})
	require.False(t, c.Reused())
	require.Equal(t, 42, query[int](t, c, "SELECT v FROM kept"))
}

func TestStartLongDataDirUsesShortSocketDir(t *testing.T) {
	t.Parallel()

	dataDir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	c := startCluster(t, Options{DataDir: dataDir})

	socketDir := c.socketDir
	require.NotEmpty(t, socketDir)
	require.True(t, strings.HasPrefix(socketDir, "/tmp/"), socketDir)
	require.FileExists(t, filepath.Join(socketDir, ".s.PGSQL."+strconv.Itoa(c.Port())))
	require.Equal(t, 1, query[int](t, c, "SELECT 1"))

	require.NoError(t, c.Stop(t.Context()))
	require.NoDirExists(t, socketDir, "Stop removes the socket directory it made")
}

func TestStartRejectsBadOptions(t *testing.T) {
	t.Parallel()

	_, err := Start(t.Context(), Options{})
	require.ErrorContains(t, err, "DataDir is required")

	_, err = Start(t.Context(), Options{DataDir: t.TempDir(), Settings: map[string]string{"work_mem; rm -rf /": "1"}})
	require.ErrorContains(t, err, "invalid setting name")
}
