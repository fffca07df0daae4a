package definitions_test

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var dbSeq atomic.Int64

// migratedOnly creates a database migrated by the numbered migrations
// alone, the definitions not installed (what a binary from before the
// definitions left, and what an old binary's functions are), and returns
// its URL. It is dropped at cleanup.
func migratedOnly(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	name := fmt.Sprintf("ferry_defs_%d_%d", time.Now().UnixNano(), dbSeq.Add(1))
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.AdminURL())
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(context.Background())
		}
	})
	u, err := url.Parse(pgtest.AdminURL())
	require.NoError(t, err)
	u.Path = "/" + name
	dbURL := u.String()

	latest, err := migrations.Latest()
	require.NoError(t, err)
	require.NoError(t, migrations.To(ctx, dbURL, latest))
	return dbURL
}

// connect opens a connection to dbURL, closed at cleanup.
func connect(t *testing.T, dbURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// functions is every function of the ferry schema: its signature → its
// definition (pg_get_functiondef) and grants.
func functions(t *testing.T, conn *pgx.Conn) map[string]string {
	t.Helper()
	return query(t, conn, `
		SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) || coalesce(p.proacl::text, '')
		FROM pg_proc p WHERE p.pronamespace = 'ferry'::regnamespace AND p.prokind = 'f'`)
}

// query runs sql, whose rows are (key, value) text pairs, into a map.
func query(t *testing.T, conn *pgx.Conn, sql string) map[string]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		require.NoError(t, rows.Scan(&k, &v))
		out[k] = v
	}
	require.NoError(t, rows.Err())
	return out
}
