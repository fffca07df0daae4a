package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/internal/server"
)

// adminKey is the key of the in-process Ferry servers.
const adminKey = "ferry-bench-admin-key-0123456789"

// maxClients is the highest concurrency of any scenario; pools and HTTP
// connection reuse are sized for it.
const maxClients = 32

// body is the message body of every message both sides send.
const body = `{"order_id":"ORD-0000000","amount_cents":4200,"currency":"EUR","customer":"cus_8f3a9b","note":"benchmark payload"}`

// Bench is the environment every scenario runs in.
type Bench struct {
	opts Options
	log  *slog.Logger

	cluster *pgcluster.Cluster // nil with -database-url
	tempDir string             // the private cluster's directory
	adminDB string             // URL of the server's maintenance database
	dbName  string
	dbURL   string

	// raw is the raw-SQL side's pool.
	raw *pgxpool.Pool
	// ferry is the in-process Ferry server; ferry2 a second instance on the
	// same database, started on demand (cross-instance wake-ups).
	ferry, ferry2 *server.Server
	client        *FerryClient
	cpu           *CPUMeter

	// statements says whether pg_stat_statements can be used, or why not.
	statementsOK     bool
	statementsReason string
	header           []string
}

// ferryConfig is the configuration of the in-process servers.
func (b *Bench) ferryConfig() server.Config { return b.ferryConfigFor(b.dbURL) }

// ferryConfigFor is the same configuration on another database.
func (b *Bench) ferryConfigFor(dbURL string) server.Config {
	cfg := server.DefaultConfig()
	cfg.DatabaseURL, cfg.Listen, cfg.AdminKey = dbURL, "127.0.0.1:0", adminKey
	cfg.ShutdownTimeout, cfg.DBMaxConns, cfg.SendWorkers = 10*time.Second, 40, b.opts.SendWorkers
	cfg.RetentionEvery, cfg.LogLevel = time.Hour, "warn"
	cfg.MetricsInterval, cfg.BodyReadTimeout = 0, 0
	// Scenario 9 pushes to a receiver of the bench's own on 127.0.0.1.
	cfg.AllowPrivatePush = true
	return cfg
}

// Setup starts (or connects to) PostgreSQL, creates the database, boots
// Ferry and opens the raw pool. Close undoes all of it.
func Setup(ctx context.Context, opts Options, log *slog.Logger) (_ *Bench, err error) {
	b := &Bench{opts: opts, log: log}
	defer func() {
		if err != nil {
			_ = b.Close()
		}
	}()
	if opts.DatabaseURL == "" {
		if err := b.startCluster(ctx); err != nil {
			return nil, err
		}
	} else {
		b.adminDB = opts.DatabaseURL
	}
	if err := b.createDatabase(ctx); err != nil {
		return nil, err
	}
	if err := b.checkDurable(ctx); err != nil {
		return nil, err
	}

	progress("booting Ferry (applies the migrations)")
	b.ferry, err = server.New(ctx, b.ferryConfig(), log)
	if err != nil {
		return nil, fmt.Errorf("boot Ferry: %w", err)
	}
	b.ferry.Start()
	b.client = NewFerryClient(b.ferry.URL())

	pcfg, err := pgxpool.ParseConfig(b.dbURL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = maxClients + 8
	if b.raw, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, fmt.Errorf("raw pool: %w", err)
	}
	dataDir := ""
	if b.cluster != nil {
		dataDir = b.cluster.DataDir()
	}
	b.cpu = NewCPUMeter(dataDir)
	b.setupStatements(ctx)
	if err := b.describe(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// startCluster starts the private durable cluster. pg_stat_statements must
// be preloaded at server start: when the installation has it, the cluster
// is restarted once with it (tracking stays off until the statements
// scenario).
func (b *Bench) startCluster(ctx context.Context) error {
	if err := os.MkdirAll(b.opts.DataDir, 0o755); err != nil {
		return err
	}
	if fs := fsType(b.opts.DataDir); fs == "tmpfs" || fs == "ramfs" {
		return fmt.Errorf("%s is on %s, where fsync costs nothing: a durable benchmark needs a real disk (use -data-dir)", b.opts.DataDir, fs)
	}
	dir, err := os.MkdirTemp(b.opts.DataDir, "ferry-bench-")
	if err != nil {
		return err
	}
	b.tempDir = dir
	progress("starting a private durable PostgreSQL in %s", dir)
	settings := map[string]string{
		// Room for the bulk fills between explicit CHECKPOINTs, so that no
		// checkpoint is forced in the middle of a measurement (both sides
		// benefit alike). Everything else is PostgreSQL's default.
		"max_wal_size": "4GB",
	}
	opts := pgcluster.Options{DataDir: filepath.Join(dir, "data"), Durable: true, Settings: settings}
	if b.cluster, err = pgcluster.Start(ctx, opts); err != nil {
		return err
	}
	b.adminDB = b.cluster.URL("postgres")
	var available bool
	if err := queryRow(ctx, b.adminDB, `SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pg_stat_statements')`, &available); err != nil {
		return err
	}
	if !available {
		b.statementsReason = "pg_stat_statements is not part of this PostgreSQL installation (pg_available_extensions)"
		return nil
	}
	if err := b.cluster.Stop(ctx); err != nil {
		return err
	}
	settings["shared_preload_libraries"] = "pg_stat_statements"
	if b.cluster, err = pgcluster.Start(ctx, opts); err != nil {
		return err
	}
	b.adminDB = b.cluster.URL("postgres")
	return nil
}

// createDatabase creates a database of the bench's own.
func (b *Bench) createDatabase(ctx context.Context) (err error) {
	b.dbName = fmt.Sprintf("ferry_bench_%d", time.Now().Unix())
	b.dbURL, err = b.newDatabase(ctx, b.dbName)
	return err
}

// newDatabase creates an empty database on the server and returns its URL.
func (b *Bench) newDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, b.adminDB)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", redact(b.adminDB), err)
	}
	defer closeConn(conn)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(b.adminDB)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// dropDatabase drops a database of the bench's, closing its sessions.
func (b *Bench) dropDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, b.adminDB)
	if err == nil {
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		closeConn(conn)
	}
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// checkDurable refuses servers that do not sync commits: their figures
// would say nothing about a broker.
func (b *Bench) checkDurable(ctx context.Context) error {
	for _, s := range []string{"fsync", "synchronous_commit"} {
		var v string
		if err := queryRow(ctx, b.dbURL, "SHOW "+s, &v); err != nil {
			return err
		}
		if v == "off" {
			return fmt.Errorf("the server runs with %s=off: refusing to benchmark a non-durable database", s)
		}
	}
	return nil
}

// setupStatements decides whether the statements scenario can run.
func (b *Bench) setupStatements(ctx context.Context) {
	if b.statementsReason != "" {
		return
	}
	var preload string
	_ = b.raw.QueryRow(ctx, `SHOW shared_preload_libraries`).Scan(&preload)
	if !strings.Contains(preload, "pg_stat_statements") {
		b.statementsReason = "pg_stat_statements is not in shared_preload_libraries on this server"
		return
	}
	if _, err := b.raw.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		b.statementsReason = "CREATE EXTENSION pg_stat_statements failed: " + err.Error()
		return
	}
	if b.cluster != nil {
		// Our own cluster: track nothing until the statements scenario.
		if err := b.setTracking(ctx, "none"); err != nil {
			b.statementsReason = "cannot set pg_stat_statements.track: " + err.Error()
			return
		}
	}
	b.statementsOK = true
}

// setTracking sets pg_stat_statements.track server-wide (own cluster only).
func (b *Bench) setTracking(ctx context.Context, level string) error {
	if _, err := b.raw.Exec(ctx, `ALTER SYSTEM SET pg_stat_statements.track = `+pgx.Identifier{level}.Sanitize()); err != nil {
		return err
	}
	if _, err := b.raw.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return err
	}
	// Backends apply a reload before their next command; give the
	// postmaster time to pass the signal on.
	time.Sleep(300 * time.Millisecond)
	return nil
}

// secondServer starts (once) another Ferry instance on the same database.
func (b *Bench) secondServer(ctx context.Context) (*server.Server, error) {
	if b.ferry2 != nil {
		return b.ferry2, nil
	}
	cfg := b.ferryConfig()
	cfg.SkipMigrations = true
	s, err := server.New(ctx, cfg, b.log)
	if err != nil {
		return nil, err
	}
	s.Start()
	b.ferry2 = s
	return s, nil
}

// Close stops the servers, drops the database and stops and removes the
// private cluster.
func (b *Bench) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	for _, s := range []*server.Server{b.ferry2, b.ferry} {
		if s != nil {
			if err := s.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("shut down Ferry: %w", err))
			}
		}
	}
	if b.raw != nil {
		b.raw.Close()
	}
	if b.cluster != nil {
		progress("stopping the private PostgreSQL")
		if err := b.cluster.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	} else if b.dbName != "" && b.adminDB != "" {
		if err := b.dropDatabase(ctx, b.dbName); err != nil {
			errs = append(errs, err)
		}
	}
	if b.tempDir != "" {
		if err := os.RemoveAll(b.tempDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// describe builds the report header: machine, versions, settings.
func (b *Bench) describe(ctx context.Context) error {
	show := func(name string) string {
		var v string
		if err := b.raw.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
			return "?"
		}
		return v
	}
	var version string
	if err := b.raw.QueryRow(ctx, `SELECT version()`).Scan(&version); err != nil {
		return err
	}
	where := "a private durable cluster started by the bench (pgcluster)"
	if b.cluster == nil {
		where = "an existing server (-database-url)"
	} else {
		where += fmt.Sprintf(", data directory on %s", fsType(b.cluster.DataDir()))
	}
	cfg := b.ferryConfig()
	b.header = []string{
		"Date: " + time.Now().UTC().Format("2006-01-02 15:04 MST"),
		fmt.Sprintf("Machine: %d CPUs (%s), %s RAM, %s/%s", runtime.NumCPU(), cpuModel(), memTotal(), runtime.GOOS, runtime.GOARCH),
		"PostgreSQL: " + version + " — " + where,
		fmt.Sprintf("Durability: fsync=%s, synchronous_commit=%s, full_page_writes=%s, wal_sync_method=%s",
			show("fsync"), show("synchronous_commit"), show("full_page_writes"), show("wal_sync_method")),
		fmt.Sprintf("Other settings: shared_buffers=%s, max_wal_size=%s, autovacuum=%s (defaults except max_wal_size)",
			show("shared_buffers"), show("max_wal_size"), show("autovacuum")),
		"Go: " + runtime.Version() + ", Ferry: the tree this report is committed with" + uncommitted(ctx),
		fmt.Sprintf("Ferry: in-process, DBMaxConns=%d, SendWorkers=%d, NotifyWindow=%s, FallbackPoll=%s; raw SQL: separate pgxpool (MaxConns=%d) on the same database",
			cfg.DBMaxConns, cfg.SendWorkers, cfg.NotifyWindow, cfg.FallbackPoll, maxClients+8),
		"Load generator: in the same process (HTTP client for Ferry, pgx for raw SQL), so its CPU competes with Ferry and PostgreSQL for the same cores",
	}
	return nil
}

// queryRow runs one query on a short-lived connection.
func queryRow(ctx context.Context, dbURL, sql string, dest ...any) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	return conn.QueryRow(ctx, sql).Scan(dest...)
}

// closeConn closes a connection that has done its work; a failure to say
// goodbye changes nothing.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "the database URL"
	}
	return p.Redacted()
}

func fsType(path string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return "unknown filesystem"
	}
	switch st.Type {
	case 0x01021994:
		return "tmpfs"
	case 0x858458f6:
		return "ramfs"
	case 0xEF53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x794c7630:
		return "overlayfs"
	}
	return fmt.Sprintf("filesystem 0x%x", st.Type)
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return "unknown"
}

// uncommitted warns when the tree measured differs from its last commit.
// The report names no revision: it is committed with the tree it
// measures, and a hash would not survive a rebase or a merge.
func uncommitted(ctx context.Context) string {
	st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil || len(strings.TrimSpace(string(st))) > 0 {
		return " (measured with uncommitted changes, or outside git)"
	}
	return ""
}

// newHTTPClient keeps enough idle connections for every concurrent client.
func newHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4 * maxClients
	t.MaxIdleConnsPerHost = 2 * maxClients
	t.DisableCompression = true
	return &http.Client{Transport: t, Timeout: time.Minute}
}
