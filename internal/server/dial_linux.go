package server

import (
	"time"

	"golang.org/x/sys/unix"
)

// setTCPUserTimeout sets the socket's TCP_USER_TIMEOUT (milliseconds).
func setTCPUserTimeout(fd uintptr, d time.Duration) error {
	return unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
}
