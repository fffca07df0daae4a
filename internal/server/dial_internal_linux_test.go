package server

import (
	"context"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The pools' dialer sets TCP_USER_TIMEOUT on TCP connections and leaves
// Unix sockets (host=/var/run/postgresql) alone: the option is TCP's,
// and setting it there would fail every connection.
func TestDialerTCPAndUnixSockets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pcfg, err := mainPoolConfig(Config{DatabaseURL: "postgres://ferry@db/ferry", DBTCPUserTimeout: 12 * time.Second})
	require.NoError(t, err)
	dial := pcfg.ConnConfig.DialFunc

	sock := filepath.Join(t.TempDir(), ".s.PGSQL.5432")
	ul, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ul.Close()
	uc, err := dial(ctx, "unix", sock)
	require.NoError(t, err, "a Unix socket connects as before")
	require.NoError(t, uc.Close())

	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer tl.Close()
	tc, err := dial(ctx, "tcp", tl.Addr().String())
	require.NoError(t, err)
	defer tc.Close()
	raw, err := tc.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	var ms, idle int
	var optErr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		ms, optErr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
		if optErr == nil {
			idle, optErr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		}
	}))
	require.NoError(t, optErr)
	require.Equal(t, 12000, ms)
	require.Equal(t, 4, idle)

	off, err := mainPoolConfig(Config{DatabaseURL: "postgres://ferry@db/ferry"})
	require.NoError(t, err)
	require.NotNil(t, off.ConnConfig.DialFunc, "0: pgx's own dialer")
}
