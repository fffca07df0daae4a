package server

import (
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A database host that vanishes (a partition, a machine gone, not a
// clean shutdown) sends no reset: a connection blocked in a read would
// wait for TCP's retransmission timeout (about 15 minutes on Linux)
// with data unacknowledged, and forever, or until keepalives give up,
// with none, which is how the LISTEN connections wait. So every
// connection Ferry's server opens (both pools, the notifier's LISTEN
// connection, which copies its pool's configuration, and River's, taken
// from the direct pool) is dialled with:
//
//   - TCP_USER_TIMEOUT (Linux): the connection fails once data it sent has
//     gone unacknowledged for FERRY_DB_TCP_USER_TIMEOUT; and
//   - keepalives, idle a third of it, then at most two probes a third of
//     it apart: an idle connection finds the host gone in about as long
//     (on Linux the user timeout decides when, past the first probe).
//
// With FERRY_DB_TCP_USER_TIMEOUT=0 neither is set: pgx's dialer, Go's
// default keepalives (15 s, 9 probes).

// tcpUserTimeoutMin and tcpUserTimeoutMax bound FERRY_DB_TCP_USER_TIMEOUT
// (0 aside): keepalives count in whole seconds, and past a day the bound
// no longer bounds anything.
const (
	tcpUserTimeoutMin = time.Second
	tcpUserTimeoutMax = 24 * time.Hour
)

// keepAliveProbes is how many unanswered keepalive probes end an idle
// connection where TCP_USER_TIMEOUT does not (other systems than Linux).
const keepAliveProbes = 2

// checkTCPUserTimeout refuses a FERRY_DB_TCP_USER_TIMEOUT out of bounds.
func (c Config) checkTCPUserTimeout() error {
	d := c.DBTCPUserTimeout
	if d != 0 && (d < tcpUserTimeoutMin || d > tcpUserTimeoutMax) {
		return fmt.Errorf("FERRY_DB_TCP_USER_TIMEOUT is %s: it must be 0 (off) or from %s to %s (e.g. 30s)",
			d, tcpUserTimeoutMin, "24h")
	}
	return nil
}

// dbDialFunc is how the pools connect: nil (pgx's dialer) when
// userTimeout is 0, else a dialer that sets TCP_USER_TIMEOUT and the
// keepalives on every TCP connection (not on Unix sockets).
func dbDialFunc(userTimeout time.Duration) pgconn.DialFunc {
	if userTimeout <= 0 {
		return nil
	}
	third := max(userTimeout/3, time.Second)
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: third, Interval: third, Count: keepAliveProbes},
		Control: func(network, _ string, c syscall.RawConn) error {
			switch network {
			case "tcp", "tcp4", "tcp6":
			default:
				return nil
			}
			var err error
			if cerr := c.Control(func(fd uintptr) { err = setTCPUserTimeout(fd, userTimeout) }); cerr != nil {
				return cerr
			}
			if err != nil {
				return fmt.Errorf("set TCP_USER_TIMEOUT: %w", err)
			}
			return nil
		},
	}
	return d.DialContext
}
