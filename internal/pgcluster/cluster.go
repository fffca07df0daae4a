package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure Start.
type Options struct {
	// DataDir is the cluster's data directory, created and initialised by
	// Start when it has no PG_VERSION file. Required.
	DataDir string

	// Port is the TCP port to listen on, on 127.0.0.1. Zero picks a free
	// one. Ignored when the data directory's server is already running.
	Port int

	// Durable keeps PostgreSQL's crash safety. When false (for tests), the
	// server runs with fsync, synchronous_commit and full_page_writes off
	// and initdb does not sync: much faster, and unsafe if the machine
	// crashes.
	Durable bool

	// Settings are extra server settings, each passed as -c NAME=VALUE.
	// They override Start's own (max_connections=200, the non-durable ones).
	Settings map[string]string

	// Logf, if set, receives progress lines (initdb, start, stop, and any
	// change Start makes outside the data directory).
	Logf func(format string, args ...any)
}

// Cluster is a PostgreSQL server running on a data directory, reached at
// 127.0.0.1:Port as the trusted superuser "postgres".
type Cluster struct {
	dataDir   string
	port      int
	reused    bool
	binDir    string  // "" when reused
	run       *runner // nil when reused
	socketDir string  // a directory Start made under /tmp, removed by Stop; or ""
	logf      func(string, ...any)

	stopOnce sync.Once
	stopErr  error
}

// maxSocketPath is the longest Unix socket path accepted everywhere:
// sun_path is 108 bytes on Linux and 104 on macOS, NUL included.
const maxSocketPath = 103

// logFile is the server's log, in the data directory.
const logFile = "postgresql.log"

// settingName is what Start accepts as a setting name in Options.Settings
// (it becomes part of a shell command line).
var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// Start returns a running cluster on opts.DataDir: the server already
// running there (see Reused), or a new one, initialising the directory
// first when needed. See the package documentation for what it does as root.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.DataDir == "" {
		return nil, errors.New("pgcluster: Options.DataDir is required")
	}
	for name := range opts.Settings {
		if !settingName.MatchString(name) {
			return nil, fmt.Errorf("pgcluster: invalid setting name %q", name)
		}
	}
	dataDir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}

	if c, err := reuse(ctx, dataDir, logf); c != nil || err != nil {
		return c, err
	}

	binDir, err := findBinDir(os.Getenv("PATH"), debianRoot)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	run, err := newRunner(ctx, logf)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	c := &Cluster{dataDir: dataDir, binDir: binDir, run: run, logf: logf}

	if err := run.prepareDir(dataDir, logf); err != nil {
		return nil, fmt.Errorf("pgcluster: data directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := c.initdb(ctx, opts.Durable); err != nil {
			return nil, err
		}
	}

	// A free port may be taken by someone else before the server binds it:
	// pick another and retry a few times.
	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, fmt.Errorf("pgcluster: pick a port: %w", err)
			}
		}
		err := c.start(ctx, port, opts)
		if err == nil {
			return c, nil
		}
		// Two processes starting the same data directory at once: the loser
		// uses the winner's server.
		if rc, rerr := reuse(ctx, dataDir, logf); rc != nil {
			c.removeSocketDir()
			return rc, nil
		} else if rerr != nil {
			err = errors.Join(err, rerr)
		}
		c.removeSocketDir()
		if opts.Port != 0 || attempt == 3 || !strings.Contains(err.Error(), "already in use") {
			return nil, err
		}
		logf("pgcluster: port %d was taken, trying another", port)
	}
}

// initdb creates the cluster in c.dataDir.
func (c *Cluster) initdb(ctx context.Context, durable bool) error {
	begin := time.Now()
	args := []string{
		"--pgdata", c.dataDir,
		"--username", "postgres",
		"--auth", "trust",
		"--encoding", "UTF8",
		"--locale", "C",
	}
	if !durable {
		args = append(args, "--no-sync")
	}
	out, err := c.run.command(ctx, filepath.Join(c.binDir, "initdb"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: initdb %s: %w\n%s", c.dataDir, err, strings.TrimSpace(string(out)))
	}
	c.logf("pgcluster: initdb %s (%s)", c.dataDir, time.Since(begin).Round(time.Millisecond))
	return nil
}

// start starts the server on port with pg_ctl and waits until it accepts
// connections.
func (c *Cluster) start(ctx context.Context, port int, opts Options) error {
	begin := time.Now()
	socketDir := c.dataDir
	if len(socketDir)+len("/.s.PGSQL.")+len(strconv.Itoa(port)) > maxSocketPath {
		dir, err := os.MkdirTemp("/tmp", "ferrypg")
		if err != nil {
			return fmt.Errorf("pgcluster: socket directory: %w", err)
		}
		c.socketDir = dir
		if err := c.run.prepareDir(dir, c.logf); err != nil {
			return fmt.Errorf("pgcluster: socket directory: %w", err)
		}
		socketDir = dir
	}

	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(port),
		"unix_socket_directories": socketDir,
		"max_connections":         "200",
	}
	if !opts.Durable {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
	}
	maps.Copy(settings, opts.Settings)
	// pg_ctl hands -o to the server through /bin/sh: quote each value.
	var serverOpts []string
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		serverOpts = append(serverOpts, "-c", shellQuote(name+"="+settings[name]))
	}

	out, err := c.run.command(ctx, filepath.Join(c.binDir, "pg_ctl"), "start",
		"--pgdata", c.dataDir,
		"--wait", "--timeout", "60",
		"--log", filepath.Join(c.dataDir, logFile),
		"--options", strings.Join(serverOpts, " "),
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: start server in %s: %w\n%s\n%s", c.dataDir, err,
			strings.TrimSpace(string(out)), c.logTail())
	}
	c.port = port
	c.logf("pgcluster: started PostgreSQL on 127.0.0.1:%d, data %s (%s)", port, c.dataDir,
		time.Since(begin).Round(time.Millisecond))
	return nil
}

// logTail returns the end of the server log, which says why a start failed.
func (c *Cluster) logTail() string {
	return fileTail("server log", filepath.Join(c.dataDir, logFile))
}

// fileTail returns the last 15 lines of the log at path, headed by what
// it is, or "" when it cannot be read.
func fileTail(what, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return what + " (" + path + "):\n" + strings.Join(lines, "\n")
}

// reuse returns a Cluster for the server already running on dataDir, or nil
// when there is none.
func reuse(ctx context.Context, dataDir string, logf func(string, ...any)) (*Cluster, error) {
	// postmaster.pid: PID, data directory, start time, port, socket
	// directory, listen address, shared memory key, status.
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil, nil
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return nil, nil // being written, or stale: leave it to pg_ctl
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil || !ProcessAlive(pid) {
		return nil, nil
	}
	// A live PID may be another program that reused it: the port must answer.
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
			logf("pgcluster: reusing PostgreSQL already running on %s (PID %d), data %s", addr, pid, dataDir)
			return &Cluster{dataDir: dataDir, port: port, reused: true, logf: logf}, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pgcluster: %s/postmaster.pid names running PID %d on port %d, but %s does not answer "+
				"(if no PostgreSQL runs there, remove postmaster.pid): %w", dataDir, pid, port, addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ProcessAlive reports whether a process with this PID exists (it may
// belong to another user).
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	defer p.Release()
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// URL returns the URL of database on this cluster, as the superuser.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, database)
}

// Port returns the TCP port the server listens on, on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// DataDir returns the absolute path of the data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// Reused reports whether the server was already running when Start was
// called. A reused cluster is not this Cluster's to stop.
func (c *Cluster) Reused() bool { return c.reused }

// Stop shuts the server down (pg_ctl stop, fast mode: sessions are
// disconnected, and waits until it has exited). It does nothing for a
// reused cluster. Calling it again returns the first call's result.
func (c *Cluster) Stop(ctx context.Context) error {
	if c.reused {
		return nil
	}
	c.stopOnce.Do(func() {
		begin := time.Now()
		out, err := c.run.command(ctx, filepath.Join(c.binDir, "pg_ctl"), "stop",
			"--pgdata", c.dataDir, "--mode", "fast", "--wait", "--timeout", "60",
		).CombinedOutput()
		if err != nil {
			c.stopErr = fmt.Errorf("pgcluster: stop server in %s: %w\n%s", c.dataDir, err, strings.TrimSpace(string(out)))
			return
		}
		c.removeSocketDir()
		c.logf("pgcluster: stopped PostgreSQL on 127.0.0.1:%d (%s)", c.port, time.Since(begin).Round(time.Millisecond))
	})
	return c.stopErr
}

func (c *Cluster) removeSocketDir() {
	if c.socketDir != "" {
		_ = os.RemoveAll(c.socketDir)
		c.socketDir = ""
	}
}
