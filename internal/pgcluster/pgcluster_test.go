package pgcluster

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

func TestFindBinDir(t *testing.T) {
	t.Parallel()

	// fakeServer makes dir look like a PostgreSQL bin directory.
	fakeServer := func(t *testing.T, dir string) string {
		t.Helper()
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755))
		}
		return dir
	}

	t.Run("PgConfig", func(t *testing.T) {
		t.Parallel()
		bin := fakeServer(t, filepath.Join(t.TempDir(), "bin"))
		path := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(path, "pg_config"), []byte("#!/bin/sh\necho "+bin+"\n"), 0o755))
		root := t.TempDir()
		fakeServer(t, filepath.Join(root, "17", "bin"))

		dir, err := findBinDir(path, root)
		require.NoError(t, err)
		require.Equal(t, bin, dir, "pg_config wins over the versioned directories")
	})

	t.Run("PgConfigWithoutServer", func(t *testing.T) {
		t.Parallel()
		path := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(path, "pg_config"), []byte("#!/bin/sh\necho /nonexistent\n"), 0o755))
		root := t.TempDir()
		want := fakeServer(t, filepath.Join(root, "15", "bin"))

		dir, err := findBinDir(path, root)
		require.NoError(t, err)
		require.Equal(t, want, dir)
	})

	t.Run("NewestVersion", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		fakeServer(t, filepath.Join(root, "9.6", "bin"))
		fakeServer(t, filepath.Join(root, "14", "bin"))
		want := fakeServer(t, filepath.Join(root, "16", "bin"))
		require.NoError(t, os.MkdirAll(filepath.Join(root, "18", "bin"), 0o755)) // client only
		require.NoError(t, os.MkdirAll(filepath.Join(root, "common"), 0o755))

		dir, err := findBinDir("", root)
		require.NoError(t, err)
		require.Equal(t, want, dir)
	})

	t.Run("Path", func(t *testing.T) {
		t.Parallel()
		want := fakeServer(t, t.TempDir())

		dir, err := findBinDir(t.TempDir()+string(os.PathListSeparator)+want, t.TempDir())
		require.NoError(t, err)
		require.Equal(t, want, dir)
	})

	t.Run("PathSymlink", func(t *testing.T) {
		t.Parallel()
		want := fakeServer(t, t.TempDir())
		path := t.TempDir()
		require.NoError(t, os.Symlink(filepath.Join(want, "initdb"), filepath.Join(path, "initdb")))

		dir, err := findBinDir(path, t.TempDir())
		require.NoError(t, err)
		require.Equal(t, want, dir, "initdb on PATH is followed to the directory with postgres")
	})

	t.Run("NotInstalled", func(t *testing.T) {
		t.Parallel()
		_, err := findBinDir(t.TempDir(), t.TempDir())
		require.ErrorIs(t, err, ErrNotInstalled)
		require.ErrorContains(t, err, "apt-get install -y postgresql")
		require.ErrorContains(t, err, "brew install postgresql")
	})
}

func TestShellQuote(t *testing.T) {
	t.Parallel()

	require.Equal(t, `'a b'`, shellQuote("a b"))
	require.Equal(t, `'it'\''s'`, shellQuote("it's"))
}

// TestStandbyFailover: a synchronous standby has every commit the primary
// acknowledged; after a kill -9 of the primary and Promote it takes writes,
// which do not wait for a standby (synchronous_standby_names, copied from
// the primary, is cleared).
func TestStandbyFailover(t *testing.T) {
	t.Parallel()

	primary := startCluster(t, Options{Durable: true, Settings: map[string]string{
		"wal_level": "replica", "max_wal_senders": "4",
	}})
	standby, err := primary.StartStandby(t.Context(), StandbyOptions{
		DataDir: filepath.Join(t.TempDir(), "standby"), Name: "ferry_standby", Logf: t.Logf,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, standby.Stop(context.Background())) })

	require.Equal(t, `"ferry_standby"`, query[string](t, primary, "SHOW synchronous_standby_names"))
	require.Equal(t, "sync", query[string](t, primary,
		"SELECT sync_state FROM pg_stat_replication WHERE application_name = 'ferry_standby'"))
	require.True(t, query[bool](t, standby, "SELECT pg_is_in_recovery()"))
	require.Equal(t, `"ferry_standby"`, query[string](t, standby, "SHOW synchronous_standby_names"),
		"the standby inherits the primary's synchronous_standby_names: the trap Promote clears")

	conn, err := pgx.Connect(t.Context(), primary.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(t.Context(), "CREATE TABLE acked AS SELECT generate_series(1, 1000) AS v")
	require.NoError(t, err)
	require.NoError(t, conn.Close(t.Context()))

	pidFile, err := os.ReadFile(filepath.Join(primary.DataDir(), "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	require.NoError(t, err)
	children := childrenOf(pid)
	require.NotEmpty(t, children, "the postmaster has children (checkpointer, walsender, ...)")
	require.NoError(t, primary.Kill())
	require.Eventually(t, func() bool {
		for _, p := range append(children, pid) {
			if ProcessAlive(p) && !zombie(p) {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "every process of the server is gone, not only the postmaster")
	require.NoError(t, primary.Stop(t.Context()), "Stop after Kill does nothing")
	_, err = pgx.Connect(t.Context(), primary.URL("postgres"))
	require.Error(t, err, "the primary is gone")

	require.NoError(t, standby.Promote(t.Context()))
	require.False(t, query[bool](t, standby, "SELECT pg_is_in_recovery()"))
	require.Equal(t, "", query[string](t, standby, "SHOW synchronous_standby_names"))
	require.Equal(t, 1000, query[int](t, standby, "SELECT count(*)::int FROM acked"),
		"every commit the primary acknowledged is on the promoted standby")
	// A commit on the new primary does not wait for a standby: it would
	// hang past the statement timeout if it did.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err = pgx.Connect(ctx, standby.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "INSERT INTO acked VALUES (1001)")
	require.NoError(t, err)
}
