package server

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMainPoolExecMode(t *testing.T) {
	t.Parallel()

	const url = "postgres://ferry@pgbouncer:6432/ferry?sslmode=disable"
	const direct = "postgres://ferry@db:5432/ferry?sslmode=disable"
	for _, tc := range []struct {
		name    string
		cfg     Config
		want    pgx.QueryExecMode
		session string
	}{
		{"no direct URL: pgx's default", Config{DatabaseURL: url}, pgx.QueryExecModeCacheStatement, url},
		{"behind a pooler: unnamed statements", Config{DatabaseURL: url, DatabaseDirectURL: direct},
			pgx.QueryExecModeCacheDescribe, direct},
		{"the URL's own choice stands", Config{DatabaseURL: url + "&default_query_exec_mode=simple_protocol", DatabaseDirectURL: direct},
			pgx.QueryExecModeSimpleProtocol, direct},
		{"also pgx's default, named", Config{DatabaseURL: url + "&default_query_exec_mode=cache_statement", DatabaseDirectURL: direct},
			pgx.QueryExecModeCacheStatement, direct},
		{"a keyword/value connection string", Config{DatabaseURL: "host=pgbouncer dbname=ferry default_query_exec_mode=exec", DatabaseDirectURL: direct},
			pgx.QueryExecModeExec, direct},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.DBMaxConns = 7
			pcfg, err := mainPoolConfig(tc.cfg)
			require.NoError(t, err)
			require.Equal(t, tc.want, pcfg.ConnConfig.DefaultQueryExecMode)
			require.Equal(t, int32(7), pcfg.MaxConns)
			require.NotContains(t, pcfg.ConnConfig.RuntimeParams, execModeParam, "not sent to the server")
			require.Equal(t, tc.session, tc.cfg.SessionURL())
		})
	}

	_, err := mainPoolConfig(Config{DatabaseURL: "postgres://x/y?default_query_exec_mode=nope", DatabaseDirectURL: direct})
	require.ErrorContains(t, err, "FERRY_DATABASE_URL")
}

// TestConnectBound: each pool bounds a connection attempt to
// defaultConnectTimeout when its URL says nothing, and keeps the URL's own
// connect_timeout when it does, 0 (wait as long as the context allows)
// included.
func TestConnectBound(t *testing.T) {
	t.Parallel()
	const url = "postgres://ferry@db:5432/ferry?sslmode=disable"
	for _, tc := range []struct {
		url  string
		want time.Duration
	}{
		{url, defaultConnectTimeout},
		{url + "&connect_timeout=0", 0},
		{url + "&connect_timeout=2", 2 * time.Second},
		{"host=db dbname=ferry", defaultConnectTimeout},
		{"host=db dbname=ferry connect_timeout=0", 0},
		{"host=db connect_timeout = '0' dbname=ferry", 0},
	} {
		main, err := mainPoolConfig(Config{DatabaseURL: tc.url})
		require.NoError(t, err)
		require.Equal(t, tc.want, main.ConnConfig.ConnectTimeout, "main: %s", tc.url)
		direct, err := directPoolConfig(Config{DatabaseURL: url, DatabaseDirectURL: tc.url})
		require.NoError(t, err)
		require.Equal(t, tc.want, direct.ConnConfig.ConnectTimeout, "direct: %s", tc.url)
	}
}
