package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

// adminPool returns a pool on the server's admin database.
func adminPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), AdminURL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func databaseExists(t *testing.T, admin *pgxpool.Pool, name string) bool {
	t.Helper()
	var exists bool
	require.NoError(t, admin.QueryRow(t.Context(),
		"SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	return exists
}

func nameOf(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return strings.TrimPrefix(u.Path, "/")
}

func TestEnsureTemplate(t *testing.T) {
	t.Parallel()

	// A template of its own: rebuilding the real one would pull it away
	// from the tests cloning it, here and in other processes on the server.
	name := databaseName("tpl")
	admin := adminPool(t)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+ident(name))
		require.NoError(t, err)
	})
	oid := func() uint32 {
		var oid uint32
		require.NoError(t, admin.QueryRow(t.Context(), "SELECT oid FROM pg_database WHERE datname = $1", name).Scan(&oid))
		return oid
	}
	var comment *string
	var allowConn bool
	describe := func() {
		require.NoError(t, admin.QueryRow(t.Context(),
			"SELECT shobj_description(oid, 'pg_database'), datallowconn FROM pg_database WHERE datname = $1", name).
			Scan(&comment, &allowConn))
	}

	require.NoError(t, ensureTemplate(t.Context(), admin, AdminURL(), name))
	first := oid()
	describe()
	require.Equal(t, templateReady, *comment)
	require.False(t, allowConn, "nobody can connect to the template and block clones")

	require.NoError(t, ensureTemplate(t.Context(), admin, AdminURL(), name))
	require.Equal(t, first, oid(), "a complete template is reused")

	_, err := admin.Exec(t.Context(), "COMMENT ON DATABASE "+ident(name)+" IS NULL")
	require.NoError(t, err)
	require.NoError(t, ensureTemplate(t.Context(), admin, AdminURL(), name))
	require.NotEqual(t, first, oid(), "an unmarked (incomplete) template is dropped and built again")
	describe()
	require.Equal(t, templateReady, *comment)

	clone := databaseName("clone")
	_, err = admin.Exec(t.Context(), "CREATE DATABASE "+ident(clone)+" TEMPLATE "+ident(name))
	require.NoError(t, err)
	conn, err := pgx.Connect(t.Context(), withDatabase(AdminURL(), clone))
	require.NoError(t, err, "clones accept connections")
	var queues bool
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT to_regclass('ferry.queues') IS NOT NULL").Scan(&queues))
	require.True(t, queues)
	require.NoError(t, conn.Close(t.Context()))
	_, err = admin.Exec(t.Context(), "DROP DATABASE "+ident(clone))
	require.NoError(t, err)
}

func TestTemplateName(t *testing.T) {
	t.Parallel()

	name, err := templateName()
	require.NoError(t, err)
	require.Regexp(t, `^ferry_tpl_[0-9a-f]{12}$`, name)
	require.Equal(t, name, TemplateName())
	again, err := templateName()
	require.NoError(t, err)
	require.Equal(t, name, again, "the name is a pure function of the migrations")
}

func TestNewDatabaseIsolated(t *testing.T) {
	t.Parallel()

	url1, url2 := NewDatabase(t), NewDatabase(t)
	require.NotEqual(t, url1, url2)

	conn1, err := pgx.Connect(t.Context(), url1)
	require.NoError(t, err)
	t.Cleanup(func() { conn1.Close(context.Background()) })
	conn2, err := pgx.Connect(t.Context(), url2)
	require.NoError(t, err)
	t.Cleanup(func() { conn2.Close(context.Background()) })

	for _, conn := range []*pgx.Conn{conn1, conn2} {
		var queues, riverJobs bool
		require.NoError(t, conn.QueryRow(t.Context(),
			"SELECT to_regclass('ferry.queues') IS NOT NULL, to_regclass('river_job') IS NOT NULL").Scan(&queues, &riverJobs))
		require.True(t, queues, "ferry.queues exists")
		require.True(t, riverJobs, "river_job exists")
	}

	_, err = conn1.Exec(t.Context(), "INSERT INTO ferry.queues (name) VALUES ('only-in-one')")
	require.NoError(t, err)
	var n1, n2 int
	require.NoError(t, conn1.QueryRow(t.Context(), "SELECT count(*) FROM ferry.queues").Scan(&n1))
	require.NoError(t, conn2.QueryRow(t.Context(), "SELECT count(*) FROM ferry.queues").Scan(&n2))
	require.Equal(t, 1, n1)
	require.Equal(t, 0, n2)
}

func TestNewPoolParallel(t *testing.T) {
	t.Parallel()

	var (
		mu     sync.Mutex
		clones []time.Duration
	)
	t.Run("group", func(t *testing.T) {
		for i := range 8 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				begin := time.Now()
				pool := NewPool(t)
				mu.Lock()
				clones = append(clones, time.Since(begin))
				mu.Unlock()

				_, err := pool.Exec(t.Context(), "INSERT INTO ferry.queues (name) VALUES ($1)", fmt.Sprint("q", i))
				require.NoError(t, err)
				var n int
				require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM ferry.queues").Scan(&n))
				require.Equal(t, 1, n, "each test sees only its own rows")
			})
		}
	})
	t.Logf("NewPool durations with 8 in parallel: %v", clones)
}

// fakeTB records Cleanup functions and pretends to have failed, to see what
// NewDatabase does at the end of a failed test.
type fakeTB struct {
	testing.TB
	failed   bool
	cleanups []func()
	logs     []string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Failed() bool      { return f.failed }
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestNewDatabaseCleanup(t *testing.T) {
	t.Parallel()

	admin := adminPool(t)

	t.Run("Passed", func(t *testing.T) {
		t.Parallel()
		tb := &fakeTB{TB: t}
		name := nameOf(t, NewDatabase(tb))
		require.True(t, databaseExists(t, admin, name))

		tb.runCleanups()
		require.False(t, databaseExists(t, admin, name), "a passed test's database is dropped")
	})

	t.Run("PassedWithOpenConnection", func(t *testing.T) {
		t.Parallel()
		tb := &fakeTB{TB: t}
		dbURL := NewDatabase(tb)
		conn, err := pgx.Connect(t.Context(), dbURL)
		require.NoError(t, err)
		defer conn.Close(context.Background())

		tb.runCleanups()
		require.False(t, databaseExists(t, admin, nameOf(t, dbURL)), "dropped even with a session left open")
	})

	t.Run("Failed", func(t *testing.T) {
		t.Parallel()
		tb := &fakeTB{TB: t, failed: true}
		dbURL := NewDatabase(tb)
		name := nameOf(t, dbURL)

		tb.runCleanups()
		require.True(t, databaseExists(t, admin, name), "a failed test's database is kept")
		require.Len(t, tb.logs, 1)
		require.Contains(t, tb.logs[0], dbURL)

		_, err := admin.Exec(t.Context(), "DROP DATABASE "+ident(name))
		require.NoError(t, err)
	})
}

func TestDatabaseName(t *testing.T) {
	t.Parallel()

	name := databaseName("TestQueues/Send_ünicode-and spaces")
	require.Regexp(t, `^ferry_testqueues_send__nicode_and_spaces_[0-9a-f]{8}$`, name)
	require.NotEqual(t, name, databaseName("TestQueues/Send_ünicode-and spaces"))

	long := databaseName(strings.Repeat("TestVeryLong/", 20))
	require.LessOrEqual(t, len(long), 63, "PostgreSQL truncates names beyond 63 bytes")
}

func TestNewTx(t *testing.T) {
	t.Parallel()

	var (
		mu  sync.Mutex
		dbs = map[string]bool{}
	)
	t.Run("group", func(t *testing.T) {
		for i := range 4 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				tx := NewTx(t)
				var db string
				require.NoError(t, tx.QueryRow(t.Context(), "SELECT current_database()").Scan(&db))
				require.NotEqual(t, TemplateName(), db)
				mu.Lock()
				dbs[db] = true
				mu.Unlock()

				_, err := tx.Exec(t.Context(), "INSERT INTO ferry.queues (name) VALUES ($1)", t.Name())
				require.NoError(t, err)
				var n int
				require.NoError(t, tx.QueryRow(t.Context(), "SELECT count(*) FROM ferry.queues").Scan(&n))
				require.Equal(t, 1, n, "each test sees only its own uncommitted rows")

				sp, err := tx.Begin(t.Context())
				require.NoError(t, err, "Begin on the transaction makes a savepoint")
				require.NoError(t, sp.Rollback(t.Context()))
			})
		}
	})
	require.Len(t, dbs, 1, "one shared database")

	// After the group's cleanups every transaction is rolled back: a fresh
	// one sees none of their rows.
	tx := NewTx(t)
	var n int
	require.NoError(t, tx.QueryRow(t.Context(), "SELECT count(*) FROM ferry.queues").Scan(&n))
	require.Zero(t, n, "rolled back at the end of each test")
	var db string
	require.NoError(t, tx.QueryRow(t.Context(), "SELECT current_database()").Scan(&db))
	require.Regexp(t, `^ferry_shared_[0-9a-f]{8}$`, db)
	require.True(t, dbs[db])
}
