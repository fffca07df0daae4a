package server_test

import (
	"context"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// tcpOpts are the options of a TCP socket that bound how long it waits
// for a peer that is gone.
type tcpOpts struct {
	UserTimeoutMs, KeepAlive, KeepIdle, KeepIntvl, KeepCnt int
}

func readTCPOpts(fd int) (tcpOpts, error) {
	var o tcpOpts
	for _, opt := range []struct {
		level, name int
		into        *int
	}{
		{unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, &o.UserTimeoutMs},
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, &o.KeepAlive},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, &o.KeepIdle},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, &o.KeepIntvl},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, &o.KeepCnt},
	} {
		v, err := unix.GetsockoptInt(fd, opt.level, opt.name)
		if err != nil {
			return tcpOpts{}, err
		}
		*opt.into = v
	}
	return o, nil
}

// dbSockets returns the options of every connection the server of env
// has open to its database, by client port: PostgreSQL names the client
// port of each session on the database, and this process's sockets are
// searched for the ones with those local ports. It first waits for the
// two LISTEN sessions (Ferry's notifier, River's), so that every kind of
// connection is there.
func dbSockets(t *testing.T, env *ferrytest.Env) map[int]tcpOpts {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	ferrytest.WaitFor(t, 20*time.Second, "Ferry's and River's LISTEN sessions", func() bool {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query ILIKE 'listen %'`).Scan(&n))
		return n >= 2
	})
	u, err := url.Parse(env.DatabaseURL)
	require.NoError(t, err)
	serverPort, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	// A session can end between the two reads (River's elector or a pool
	// replacing a connection): then read both again.
	var found map[int]tcpOpts
	var missing []int
	ferrytest.WaitFor(t, 20*time.Second, "a socket of this process for every session", func() bool {
		rows, err := conn.Query(ctx, `SELECT client_port FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND client_port IS NOT NULL`)
		require.NoError(t, err)
		ports, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(ports), 3, "pool, notifier and River sessions")
		want := map[int]bool{}
		for _, p := range ports {
			want[int(p)] = true
		}
		found = processSockets(t, serverPort, want)
		missing = missing[:0]
		for p := range want {
			if _, ok := found[p]; !ok {
				missing = append(missing, p)
			}
		}
		return len(missing) == 0
	})
	return found
}

// processSockets returns the options of this process's TCP sockets to
// serverPort whose local port want holds, by local port.
func processSockets(t *testing.T, serverPort int, want map[int]bool) map[int]tcpOpts {
	t.Helper()
	found := map[int]tcpOpts{}
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		local, err1 := unix.Getsockname(fd)
		peer, err2 := unix.Getpeername(fd)
		if err1 != nil || err2 != nil {
			continue // not connected, or closed meanwhile
		}
		l, ok1 := local.(*unix.SockaddrInet4)
		p, ok2 := peer.(*unix.SockaddrInet4)
		if !ok1 || !ok2 || p.Port != serverPort || !want[l.Port] {
			continue
		}
		o, err := readTCPOpts(fd)
		if err != nil {
			continue // closed meanwhile
		}
		found[l.Port] = o
	}
	return found
}

// pooledSocket returns the options of one of the pool's connections, read
// on the socket under pgconn's net.Conn.
func pooledSocket(t *testing.T, env *ferrytest.Env) tcpOpts {
	t.Helper()
	c, err := env.Server.Pool().Acquire(context.Background())
	require.NoError(t, err)
	defer c.Release()
	sc, ok := c.Conn().PgConn().Conn().(syscall.Conn)
	require.True(t, ok, "%T", c.Conn().PgConn().Conn())
	raw, err := sc.SyscallConn()
	require.NoError(t, err)
	var o tcpOpts
	var optErr error
	require.NoError(t, raw.Control(func(fd uintptr) { o, optErr = readTCPOpts(int(fd)) }))
	require.NoError(t, optErr)
	return o
}

// Every connection Ferry opens to the database (the pools', the
// notifier's LISTEN, River's) carries TCP_USER_TIMEOUT, and keepalives
// that give up on an idle connection in about as long: a third of it
// idle, then two probes a third apart.
func TestDBConnectionsBoundTheirWait(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.DBTCPUserTimeout = 45 * time.Second })
	want := tcpOpts{UserTimeoutMs: 45000, KeepAlive: 1, KeepIdle: 15, KeepIntvl: 15, KeepCnt: 2}
	require.Equal(t, want, pooledSocket(t, env))
	socks := dbSockets(t, env)
	for port, o := range socks {
		require.Equal(t, want, o, "the connection from port %d", port)
	}
	t.Logf("%d connections checked", len(socks))

	def := ferrytest.Start(t) // the default, 30 s
	require.Equal(t, tcpOpts{UserTimeoutMs: 30000, KeepAlive: 1, KeepIdle: 10, KeepIntvl: 10, KeepCnt: 2}, pooledSocket(t, def))
}

// FERRY_DB_TCP_USER_TIMEOUT=0 leaves the sockets as pgx makes them: no
// TCP_USER_TIMEOUT.
func TestDBTCPUserTimeoutOff(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.DBTCPUserTimeout = 0 })
	require.Zero(t, pooledSocket(t, env).UserTimeoutMs)
	for port, o := range dbSockets(t, env) {
		require.Zero(t, o.UserTimeoutMs, "the connection from port %d", port)
	}
}
