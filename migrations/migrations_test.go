package migrations_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
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

// emptyDatabase creates a database with no schema at all (not cloned from
// the migrated template) and returns its URL.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	name := fmt.Sprintf("ferry_migrate_%d_%d", time.Now().UnixNano(), dbSeq.Add(1))
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.AdminURL())
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(pgtest.AdminURL())
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// migratedDownTo migrates a new emptyDatabase all the way up, then down
// one migration at a time to version v, and returns its URL and a
// connection to it (closed at cleanup).
func migratedDownTo(t *testing.T, v uint) (string, *pgx.Conn) {
	t.Helper()
	dbURL := emptyDatabase(t)
	ctx := context.Background()
	require.NoError(t, migrations.Up(ctx, dbURL))
	for {
		got, _, err := migrations.Version(ctx, dbURL)
		require.NoError(t, err)
		if got == v {
			break
		}
		require.NoError(t, migrations.Down(ctx, dbURL))
	}
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return dbURL, conn
}

// Several instances starting at once must apply each migration exactly
// once and all succeed.
func TestUpConcurrent(t *testing.T) {
	t.Parallel()
	dbURL := emptyDatabase(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = migrations.Up(ctx, dbURL)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	latest, err := migrations.Latest()
	require.NoError(t, err)
	v, dirty, err := migrations.Version(ctx, dbURL)
	require.NoError(t, err)
	require.False(t, dirty)
	require.Equal(t, latest, v)

	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var tables int
	require.NoError(t, conn.QueryRow(ctx,
		`SELECT count(*) FROM pg_tables WHERE schemaname = 'ferry' OR tablename = 'river_job'`).Scan(&tables))
	require.GreaterOrEqual(t, tables, 6, "ferry tables and River's job table exist")
}

func TestDownAndUpAgain(t *testing.T) {
	t.Parallel()
	dbURL, conn := migratedDownTo(t, 0)
	ctx := context.Background()
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'ferry')`).Scan(&exists))
	require.False(t, exists, "down removes the ferry schema")

	require.NoError(t, migrations.Up(ctx, dbURL))
	latest, _ := migrations.Latest()
	v, dirty, err := migrations.Version(ctx, dbURL)
	require.NoError(t, err)
	require.False(t, dirty)
	require.Equal(t, latest, v)
}

// A rolling deploy: the new release has migrated the schema past this
// binary's latest version. This binary must still start (Up leaves the
// schema alone) and be ready; a dirty or older schema is not usable.
func TestUpOnNewerSchema(t *testing.T) {
	t.Parallel()
	dbURL := emptyDatabase(t)
	ctx := context.Background()
	require.NoError(t, migrations.Up(ctx, dbURL))
	latest, err := migrations.Latest()
	require.NoError(t, err)

	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `UPDATE ferry_schema_migrations SET version = $1`, latest+1)
	require.NoError(t, err)

	require.NoError(t, migrations.Up(ctx, dbURL), "an older binary starts on a newer schema")
	v, dirty, err := migrations.Version(ctx, dbURL)
	require.NoError(t, err)
	require.Equal(t, latest+1, v, "Up leaves a newer schema as it is")
	require.False(t, dirty)

	require.NoError(t, migrations.Usable(latest+1, false))
	require.NoError(t, migrations.Usable(latest, false))
	require.ErrorContains(t, migrations.Usable(latest-1, false), "want")
	require.ErrorContains(t, migrations.Usable(latest+1, true), "dirty")
}

// Migration 000007 replaced push by River jobs with push leases: River
// rows of the removed kinds, which this version has no worker for, are
// deleted; other jobs stay.
func TestPushLeasesMigrationDropsPushJobs(t *testing.T) {
	t.Parallel()
	dbURL, conn := migratedDownTo(t, 6)
	ctx := context.Background()
	_, err := conn.Exec(ctx, `
		INSERT INTO river_job (kind, args, queue, state, max_attempts)
		VALUES ('ferry_push', '{"queue_id": 1}', 'ferry_push', 'running', 1000),
			('ferry_push_sweep', '{}', 'default', 'available', 25),
			('ferry_retention', '{}', 'default', 'available', 25)`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, dbURL))
	rows, err := conn.Query(ctx, `SELECT kind FROM river_job ORDER BY kind`)
	require.NoError(t, err)
	kinds, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"ferry_retention"}, kinds)
	var leases bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass('ferry.push_leases') IS NOT NULL`).Scan(&leases))
	require.True(t, leases)
}

// TestUpBoundsConnect: migrations connect with the same bound as the
// server's pools when the URL sets no connect_timeout, so `ferry migrate`
// (and a starting server) against a host that answers nothing (a primary
// whose machine is gone) fails, or tries the URL's next host, within
// seconds instead of waiting as long as its context allows.
func TestUpBoundsConnect(t *testing.T) {
	t.Parallel()
	silent, _ := pgtest.SilentHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	begin := time.Now()
	err := migrations.Up(ctx, fmt.Sprintf("postgres://ferry@%s/ferry?sslmode=disable", silent))
	took := time.Since(begin)
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the attempt ended before the context: %v after %v", err, took)
	require.Less(t, took, 15*time.Second)
}

// Every installation makes its own key for the keyed hash of API keys
// (000008): two databases migrated from nothing share none, so a secret's
// hash from one matches nothing in the other.
func TestKeyHashKeyPerInstallation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var keys [][]byte
	for range 2 {
		dbURL := emptyDatabase(t)
		require.NoError(t, migrations.Up(ctx, dbURL))
		conn, err := pgx.Connect(ctx, dbURL)
		require.NoError(t, err)
		var key []byte
		require.NoError(t, conn.QueryRow(ctx, `SELECT key_hash_key FROM ferry.api_key_settings`).Scan(&key))
		require.NoError(t, conn.Close(ctx))
		require.Len(t, key, 32)
		keys = append(keys, key)
	}
	require.NotEqual(t, keys[0], keys[1])
}
