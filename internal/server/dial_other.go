//go:build !linux

package server

import "time"

// setTCPUserTimeout does nothing outside Linux: there the keepalives
// alone bound an idle connection's wait (see dial.go).
func setTCPUserTimeout(uintptr, time.Duration) error { return nil }
