package pgcluster

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestStartBouncerTransactionPooling(t *testing.T) {
	t.Parallel()

	c := startCluster(t, Options{})
	b, err := StartBouncer(t.Context(), BouncerOptions{
		Dir: filepath.Join(t.TempDir(), "bouncer"), Upstream: c, PoolSize: 1, Logf: t.Logf,
	})
	require.NoError(t, err)
	t.Cleanup(b.Stop)

	// Two clients, one server connection (default_pool_size = 1): in
	// transaction mode each transaction borrows it, so both see the same
	// backend.
	pid := func(conn *pgx.Conn) int {
		var pid int
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid))
		return pid
	}
	// (Not pgx's default exec mode: its named prepared statements do not
	// work through a transaction pooler; see internal/server.)
	url := b.URL("postgres") + "&default_query_exec_mode=cache_describe"
	one, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer one.Close(context.Background())
	two, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer two.Close(context.Background())
	require.Equal(t, pid(one), pid(two))

	admin, err := pgx.Connect(t.Context(), b.AdminURL())
	require.NoError(t, err)
	defer admin.Close(context.Background())
	rows, err := admin.Query(t.Context(), "SHOW CONFIG")
	require.NoError(t, err)
	config := map[string]string{}
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		if key, ok := vals[0].(string); ok {
			value, _ := vals[1].(string)
			config[key] = value
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, "transaction", config["pool_mode"])
	require.Equal(t, "1", config["default_pool_size"])
	require.Equal(t, "127.0.0.1", config["listen_addr"])

	b.Stop()
	b.Stop() // harmless
	_, err = pgx.Connect(t.Context(), b.URL("postgres"))
	require.Error(t, err, "PgBouncer is down")
}

func TestFindBouncer(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	_, err := findBouncer(dir, []string{dir})
	require.ErrorIs(t, err, ErrBouncerNotInstalled)
	require.ErrorContains(t, err, "apt-get install -y pgbouncer")

	bin := filepath.Join(dir, "pgbouncer")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	p, err := findBouncer("", []string{t.TempDir(), dir})
	require.NoError(t, err)
	require.Equal(t, bin, p)
	p, err = findBouncer(dir, nil)
	require.NoError(t, err)
	require.Equal(t, bin, p)
}
