// Package pgtest gives tests real, isolated PostgreSQL databases, quickly.
//
// A package's TestMain calls Main. Main connects to the server named by
// FERRY_TEST_DATABASE_URL, or else starts a private throwaway cluster
// (internal/pgcluster, not durable, in a temporary directory removed at the
// end: under /dev/shm when that is a tmpfs with room, for speed, else under
// os.TempDir(); setting TMPDIR picks the latter). On that server it makes sure a template database holds the current
// schema: ferry_tpl_<hash>, named by a hash of Ferry's migration files, its
// definitions (store/definitions) and River's migrations, created and
// migrated once per server and reused by every later run with the same
// migrations and definitions. NewDatabase then clones it with
// CREATE DATABASE ... TEMPLATE, tens of milliseconds, for each test that asks.
// A test that needs no commit takes NewTx instead: a transaction on one
// database shared by the test binary, rolled back when the test ends.
//
// A test's database is dropped when the test ends, unless the test failed:
// then it is kept and its URL logged. On the private cluster that lasts until
// the test binary exits; to inspect it afterwards, point
// FERRY_TEST_DATABASE_URL at a server that outlives the tests, such as the
// one `ferry dev` runs.
//
// The private cluster costs about a second per test binary (initdb, start,
// migrate). A test binary killed before it can clean up (a timeout panic,
// Ctrl-C) leaves its directory behind; the next Main removes the directories
// of test processes that no longer exist, and PostgreSQL shuts itself down
// within a minute once its directory is gone.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/migrations"
	"github.com/ferry-mq/ferry/store/definitions"
)

// EnvDatabaseURL names the environment variable holding a superuser URL of an
// existing server to test against, e.g.
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. Unset, Main
// starts a private cluster.
const EnvDatabaseURL = "FERRY_TEST_DATABASE_URL"

// templateReady is the comment that marks a fully migrated template.
const templateReady = "ferry-template-ready"

// templateLock is the advisory lock, taken in the server's admin database,
// under which a template is created ("ferrytpl").
const templateLock int64 = 0x666572727974706c

// tempPrefix starts the names of private clusters' temporary directories.
const tempPrefix = "ferry-pgtest-"

// server is what Main set up for the tests of this process.
type server struct {
	adminURL string
	admin    *pgxpool.Pool
	template string
	private  bool // a throwaway cluster removed at exit

	shared    sharedDB  // the database NewTx begins its transactions on
	templates templates // the databases SharedTemplate built
}

// sharedDB is one database per test binary for NewTx, cloned from the
// template on first use and dropped when the tests have run. Nothing is
// ever committed to it.
type sharedDB struct {
	once sync.Once
	name string
	pool *pgxpool.Pool
	err  error
}

// current is the one PostgreSQL server of this test process, which Main
// starts and every test's NewDatabase clones from.
var current atomic.Pointer[server] //nolint:gochecknoglobals // the test process's server, set by Main

// Main runs the package's tests (m.Run) against a PostgreSQL server and
// exits with their status; call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// When the server cannot be started or the template cannot be built, Main
// prints why and exits 1: database tests fail rather than skip.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse() // for testing.Verbose
	logf := func(string, ...any) {}
	if testing.Verbose() {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	ctx := context.Background()

	if fuzzWorker() {
		// A fuzzing worker runs fuzz targets only, and fuzz targets here
		// never touch a database: one cluster per worker would cost each
		// worker a second and a PostgreSQL for nothing.
		return m.Run()
	}

	s := &server{adminURL: os.Getenv(EnvDatabaseURL)}
	if s.adminURL != "" {
		if u, err := url.Parse(s.adminURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			fmt.Fprintf(os.Stderr, "pgtest: %s must be a postgres:// URL\n", EnvDatabaseURL)
			return 1
		}
	} else {
		cluster, dir, err := startCluster(ctx, logf)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: cannot start PostgreSQL for the tests (or set %s to a server's URL): %v\n", EnvDatabaseURL, err)
			return 1
		}
		defer func() {
			if err := cluster.Stop(context.Background()); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			}
			_ = os.RemoveAll(dir)
		}()
		s.adminURL, s.private = cluster.URL("postgres"), true
	}

	admin, err := pgxpool.New(ctx, s.adminURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: connect to %s: %v\n", redact(s.adminURL), err)
		return 1
	}
	defer admin.Close()
	s.admin = admin

	begin := time.Now()
	if s.template, err = templateName(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	if err := ensureTemplate(ctx, s.admin, s.adminURL, s.template); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: template database on %s: %v\n", redact(s.adminURL), err)
		return 1
	}
	logf("pgtest: template %s ready (%s)", s.template, time.Since(begin).Round(time.Millisecond))

	current.Store(s)
	defer current.Store(nil)
	defer s.closeShared()
	defer s.dropTemplates()
	return m.Run()
}

// fuzzWorker reports whether this process is a worker that `go test -fuzz`
// started to run a fuzz target's inputs.
func fuzzWorker() bool {
	f := flag.Lookup("test.fuzzworker")
	return f != nil && f.Value.String() == "true"
}

// startCluster starts a private, non-durable cluster in a new temporary
// directory (see clusterBaseDir), returned for removal, after removing those
// of dead test processes.
func startCluster(ctx context.Context, logf func(string, ...any)) (*pgcluster.Cluster, string, error) {
	base := clusterBaseDir()
	reapOrphans(logf, base, os.TempDir())
	dir, err := os.MkdirTemp(base, tempPrefix)
	if err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", err
	}
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: filepath.Join(dir, "data"), Logf: logf})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", err
	}
	return cluster, dir, nil
}

// reapOrphans removes private cluster directories left by test processes
// that died without cleaning up. Their servers notice that postmaster.pid is
// gone and shut down within a minute.
func reapOrphans(logf func(string, ...any), bases ...string) {
	var dirs []string
	for _, base := range slices.Compact(bases) {
		found, _ := filepath.Glob(filepath.Join(base, tempPrefix+"*"))
		dirs = append(dirs, found...)
	}
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			// Just created, owner.pid not written yet; or a mystery. Leave
			// it unless it is old.
			fi, statErr := os.Stat(dir)
			if statErr != nil || time.Since(fi.ModTime()) < 10*time.Minute {
				continue
			}
		} else if pid, err := strconv.Atoi(string(b)); err == nil && pgcluster.ProcessAlive(pid) {
			continue
		}
		if err := os.RemoveAll(dir); err == nil {
			logf("pgtest: removed %s, left by a test process that no longer runs", dir)
		}
	}
}

// ensureTemplate makes sure the server has a complete template database
// called name, creating and migrating it when the server has none (or an
// incomplete one, left by a run that died). A server-wide advisory lock makes
// concurrent test processes build it once.
func ensureTemplate(ctx context.Context, admin *pgxpool.Pool, adminURL, name string) error {
	conn, err := admin.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLock); err != nil {
		return fmt.Errorf("take template lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", templateLock)
	}()

	var comment *string
	err = conn.QueryRow(ctx, "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1", name).Scan(&comment)
	switch {
	case err == nil && comment != nil && *comment == templateReady:
		return nil
	case err == nil:
		// A run died while building it.
		if _, err := conn.Exec(ctx, "DROP DATABASE "+ident(name)+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop incomplete template %s: %w", name, err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("look up template %s: %w", name, err)
	}

	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(name)); err != nil {
		return fmt.Errorf("create template %s: %w", name, err)
	}
	if err := migrations.Up(ctx, withDatabase(adminURL, name)); err != nil {
		return fmt.Errorf("migrate template %s: %w", name, err)
	}
	// A template cannot be cloned while anyone is connected to it: close it
	// to new sessions (a stray psql, a test that connects to the wrong
	// database, autovacuum, which skips databases that refuse connections)
	// and end the ones left; migrations.Up leaves one behind.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("close template %s to connections: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
		return fmt.Errorf("disconnect from template %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "COMMENT ON DATABASE "+ident(name)+" IS '"+templateReady+"'"); err != nil {
		return fmt.Errorf("mark template %s ready: %w", name, err)
	}
	return nil
}

// templateName is ferry_tpl_ and 12 hex digits of a SHA-256 of every Ferry
// migration file (name and content), the definitions (their generation
// and checksum) and every River migration: all that migrations.Up
// applies.
func templateName() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.Files(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.Files(), path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "ferry %s %d\n", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	fmt.Fprintf(h, "definitions %d %s\n", definitions.Generation, definitions.Checksum())
	rm, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		return "", fmt.Errorf("hash river migrations: %w", err)
	}
	for _, m := range rm.AllVersions() {
		fmt.Fprintf(h, "river %d %d\n%s", m.Version, len(m.SQLUp), m.SQLUp)
	}
	return "ferry_tpl_" + hex.EncodeToString(h.Sum(nil))[:12], nil
}

// NewDatabase creates a database for this test, a copy of the migrated
// template, and returns its URL. It is dropped when the test ends, unless
// the test failed: then it is kept and its URL logged. Safe for parallel
// tests. Main must have been called from TestMain.
func NewDatabase(t testing.TB) string {
	t.Helper()
	s := current.Load()
	if s == nil {
		t.Fatal("pgtest: no database server; call pgtest.Main(m) from TestMain")
	}
	return s.newDatabase(t, s.template)
}

// newDatabase is NewDatabase cloned from template.
func (s *server) newDatabase(t testing.TB, template string) string {
	t.Helper()
	name := databaseName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(template)); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	dbURL := s.url(name)

	t.Cleanup(func() {
		if t.Failed() {
			if s.private {
				t.Logf("pgtest: test failed, keeping database %s until the test binary exits: %s "+
					"(set %s to a lasting server to keep it longer)", name, dbURL, EnvDatabaseURL)
			} else {
				t.Logf("pgtest: test failed, keeping database %s: %s", name, dbURL)
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := s.admin.Exec(ctx, "DROP DATABASE "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return dbURL
}

// NewTx begins a transaction for this test on a database the test binary's
// NewTx callers share (cloned from the template once) and rolls it back
// when the test ends: the fast path for a test that needs no commit, about
// a millisecond instead of a database clone. What the test writes is
// invisible to every other session and gone afterwards, so the shared
// database stays as migrated.
//
// Only for tests that work within one transaction: no commit visibility to
// another session, no LISTEN/NOTIFY, no concurrency, no River client, and
// no time passing between statements (now() is the transaction's start
// time). Parallel tests on it must use names of their own (say, from
// t.Name()): a unique index makes an insert wait for another transaction's
// uncommitted row with the same key. Safe for parallel tests. Main must
// have been called from TestMain.
func NewTx(t testing.TB) pgx.Tx {
	t.Helper()
	s := current.Load()
	if s == nil {
		t.Fatal("pgtest: no database server; call pgtest.Main(m) from TestMain")
	}
	pool, err := s.sharedPool()
	if err != nil {
		t.Fatalf("pgtest: shared database: %v", err)
	}
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatalf("pgtest: begin on the shared database: %v", err)
	}
	t.Cleanup(func() {
		// A failed transaction rolls back just the same.
		if err := tx.Rollback(context.Background()); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("pgtest: roll back: %v", err)
		}
	})
	return tx
}

// sharedPool returns the pool on the shared database, creating both on
// first use.
func (s *server) sharedPool() (*pgxpool.Pool, error) {
	s.shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := databaseName("shared")
		if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(s.template)); err != nil {
			s.shared.err = fmt.Errorf("create database %s: %w", name, err)
			return
		}
		s.shared.name = name
		cfg, err := pgxpool.ParseConfig(s.url(name))
		if err != nil {
			s.shared.err = err
			return
		}
		// One connection per open transaction: parallel tests and their
		// parallel subtests, each holding one until it ends.
		cfg.MaxConns = 64
		s.shared.pool, s.shared.err = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	return s.shared.pool, s.shared.err
}

// closeShared closes and drops the shared database, if a test made it.
func (s *server) closeShared() {
	if s.shared.pool != nil {
		s.shared.pool.Close()
	}
	if s.shared.name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.admin.Exec(ctx, "DROP DATABASE "+ident(s.shared.name)+" WITH (FORCE)"); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: drop shared database %s: %v\n", s.shared.name, err)
	}
}

// NewPool returns a pool connected to a new database from NewDatabase,
// closed when the test ends (before the database is dropped).
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dbURL := NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", dbURL, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// AdminURL returns the superuser URL of the server Main set up (its
// "postgres" database, or the database FERRY_TEST_DATABASE_URL names). It
// panics when Main has not been called.
func AdminURL() string {
	s := current.Load()
	if s == nil {
		panic("pgtest: no database server; call pgtest.Main(m) from TestMain")
	}
	return s.adminURL
}

// TemplateName returns the name of the template database NewDatabase
// clones. It panics when Main has not been called.
func TemplateName() string {
	s := current.Load()
	if s == nil {
		panic("pgtest: no database server; call pgtest.Main(m) from TestMain")
	}
	return s.template
}

// url returns the URL of database name on the server.
func (s *server) url(name string) string { return withDatabase(s.adminURL, name) }

// withDatabase returns serverURL with its database replaced by name.
func withDatabase(serverURL, name string) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		panic(err) // run checked it
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// databaseName returns a fresh database name that says which test owns it:
// ferry_, the test name made safe and cut to 40 characters, and 8 random
// hex digits. PostgreSQL allows 63 bytes.
func databaseName(testName string) string {
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		default:
			return '_'
		}
	}, testName)
	if len(safe) > 40 {
		safe = safe[:40]
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "ferry_" + safe + "_" + hex.EncodeToString(b)
}

// ident quotes a name for SQL.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// redact hides a password in a URL for error messages.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "the database URL"
}

// SilentHost listens on a free loopback port that accepts connections and
// never answers, as a database host whose machine vanished (packets
// dropped) looks to a client until its connect timeout. It returns the
// host:port and the number of connections it has been offered so far.
func SilentHost(t testing.TB) (addr string, attempts *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("silent host: %v", err)
	}
	attempts = new(atomic.Int64)
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			attempts.Add(1)
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	return ln.Addr().String(), attempts
}
