package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrBouncerNotInstalled is wrapped by the error StartBouncer returns when
// no pgbouncer binary can be found.
var ErrBouncerNotInstalled = errors.New("PgBouncer is not installed")

// bouncerLog is PgBouncer's log (its stderr), in BouncerOptions.Dir.
const bouncerLog = "pgbouncer.log"

// BouncerOptions configure StartBouncer.
type BouncerOptions struct {
	// Dir holds pgbouncer.ini, userlist.txt and pgbouncer.log; created
	// when missing. Required.
	Dir string

	// Upstream is the cluster PgBouncer forwards to: every database on it
	// is reachable through PgBouncer under its own name, as the trusted
	// superuser "postgres". Required.
	Upstream *Cluster

	// PoolMode is pool_mode: "transaction" (the default), "session" or
	// "statement".
	PoolMode string

	// PoolSize is default_pool_size, the server connections per database
	// and user (default 3).
	PoolSize int

	// Settings are extra [pgbouncer] settings (e.g. server_round_robin);
	// they override StartBouncer's own.
	Settings map[string]string

	// Logf, if set, receives progress lines.
	Logf func(format string, args ...any)
}

// Bouncer is a PgBouncer running in the foreground as a child of this
// process, listening on 127.0.0.1:Port.
type Bouncer struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	logf func(string, ...any)

	stopOnce sync.Once
}

// StartBouncer starts PgBouncer in front of opts.Upstream on a free port
// and waits until it accepts connections. Authentication is trust, like
// the cluster's. PgBouncer refuses to run as root: as root it runs as the
// user the cluster's server runs as (see the package documentation).
func StartBouncer(ctx context.Context, opts BouncerOptions) (*Bouncer, error) {
	if opts.Dir == "" || opts.Upstream == nil {
		return nil, errors.New("pgcluster: BouncerOptions.Dir and Upstream are required")
	}
	for name := range opts.Settings {
		if !settingName.MatchString(name) {
			return nil, fmt.Errorf("pgcluster: invalid PgBouncer setting name %q", name)
		}
	}
	bin, err := findBouncer(os.Getenv("PATH"), bouncerDirs())
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	run, err := newRunner(ctx, logf)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if err := run.prepareDir(dir, logf); err != nil {
		return nil, fmt.Errorf("pgcluster: PgBouncer directory: %w", err)
	}
	// A free port may be taken before PgBouncer binds it: retry.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("pgcluster: pick a port: %w", err)
		}
		b, err := startBouncerOn(ctx, bin, run, dir, port, opts, logf)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "in use") {
			return b, err
		}
		logf("pgcluster: port %d was taken, trying another", port)
	}
}

// startBouncerOn writes the configuration for port, starts PgBouncer and
// waits until it listens (or exits).
func startBouncerOn(ctx context.Context, bin string, run *runner, dir string, port int, opts BouncerOptions,
	logf func(string, ...any)) (*Bouncer, error) {
	begin := time.Now()
	ini, err := writeBouncerConfig(run, dir, port, opts)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: PgBouncer configuration: %w", err)
	}
	logPath := filepath.Join(dir, bouncerLog)
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: PgBouncer log: %w", err)
	}
	defer out.Close() // the child has its own copy
	cmd := exec.Command(bin, ini)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = bouncerProcAttr(run)
	if run.asUser {
		cmd.Dir = "/"
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgcluster: start %s: %w", bin, err)
	}
	b := &Bouncer{dir: dir, port: port, cmd: cmd, done: make(chan struct{}), logf: logf}
	go func() { _ = cmd.Wait(); close(b.done) }()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			logf("pgcluster: started PgBouncer %s on %s in front of 127.0.0.1:%d (%s)", opts.poolMode(), addr,
				opts.Upstream.Port(), time.Since(begin).Round(time.Millisecond))
			return b, nil
		}
		select {
		case <-b.done:
			return nil, fmt.Errorf("pgcluster: PgBouncer exited at start: %s\n%s", cmd.ProcessState, b.logTail())
		case <-ctx.Done():
			b.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Stop()
			return nil, fmt.Errorf("pgcluster: PgBouncer does not listen on %s after 30 s\n%s", addr, b.logTail())
		}
	}
}

func (o BouncerOptions) poolMode() string {
	if o.PoolMode == "" {
		return "transaction"
	}
	return o.PoolMode
}

// writeBouncerConfig writes pgbouncer.ini and userlist.txt into dir and
// returns the path of pgbouncer.ini.
func writeBouncerConfig(run *runner, dir string, port int, opts BouncerOptions) (string, error) {
	poolSize := opts.PoolSize
	if poolSize <= 0 {
		poolSize = 3
	}
	users := filepath.Join(dir, "userlist.txt")
	settings := map[string]string{
		"listen_addr":       "127.0.0.1",
		"listen_port":       strconv.Itoa(port),
		"unix_socket_dir":   "",
		"auth_type":         "trust",
		"auth_file":         users,
		"admin_users":       "postgres",
		"pool_mode":         opts.poolMode(),
		"default_pool_size": strconv.Itoa(poolSize),
		"max_client_conn":   "1000",
		// Drivers that send it (lib/pq, JDBC) are not refused.
		"ignore_startup_parameters": "extra_float_digits",
	}
	maps.Copy(settings, opts.Settings)
	var ini strings.Builder
	// "*": any database name, forwarded to the database of that name.
	fmt.Fprintf(&ini, "[databases]\n* = host=127.0.0.1 port=%d\n\n[pgbouncer]\n", opts.Upstream.Port())
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		if strings.ContainsAny(settings[name], "\n\r") {
			return "", fmt.Errorf("setting %s: value has a line break", name)
		}
		fmt.Fprintf(&ini, "%s = %s\n", name, settings[name])
	}
	path := filepath.Join(dir, "pgbouncer.ini")
	for file, content := range map[string]string{path: ini.String(), users: `"postgres" ""` + "\n"} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			return "", err
		}
		if run.asUser {
			if err := os.Chown(file, run.uid, run.gid); err != nil {
				return "", err
			}
		}
	}
	return path, nil
}

// bouncerDirs are where pgbouncer is looked for after PATH: Debian puts
// it in /usr/sbin, off a non-root PATH; Homebrew in its bin.
func bouncerDirs() []string {
	return []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/bin", "/opt/homebrew/bin"}
}

// findBouncer returns the path of pgbouncer: on pathEnv, or in one of dirs.
func findBouncer(pathEnv string, dirs []string) (string, error) {
	if p := lookPath(pathEnv, "pgbouncer"); p != "" {
		return p, nil
	}
	for _, dir := range dirs {
		if p := filepath.Join(dir, "pgbouncer"); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no pgbouncer on PATH or in %s; install it with `apt-get install -y pgbouncer` "+
		"(Debian/Ubuntu) or `brew install pgbouncer` (macOS)", ErrBouncerNotInstalled, strings.Join(dirs, ", "))
}

// URL returns the URL of database through PgBouncer, as the superuser.
func (b *Bouncer) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", b.port, database)
}

// AdminURL returns the URL of PgBouncer's admin console (the "pgbouncer"
// database: SHOW POOLS, SHOW SERVERS, ...), which speaks only the simple
// query protocol.
func (b *Bouncer) AdminURL() string {
	return b.URL("pgbouncer") + "&default_query_exec_mode=simple_protocol"
}

// Port returns the TCP port PgBouncer listens on, on 127.0.0.1.
func (b *Bouncer) Port() int { return b.port }

// Stop ends PgBouncer (SIGTERM: immediate shutdown, clients are
// disconnected; SIGKILL if it has not exited within 5 s) and waits for
// it. Calling it again does nothing.
func (b *Bouncer) Stop() {
	b.stopOnce.Do(func() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
		b.logf("pgcluster: stopped PgBouncer on 127.0.0.1:%d", b.port)
	})
}

// logTail returns the end of PgBouncer's log, which says why it failed.
func (b *Bouncer) logTail() string {
	return fileTail("PgBouncer log", filepath.Join(b.dir, bouncerLog))
}
