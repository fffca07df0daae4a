//go:build !linux

package pgcluster

import "syscall"

// bouncerProcAttr runs PgBouncer as the runner's user.
func bouncerProcAttr(r *runner) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if r.asUser {
		attr.Credential = &syscall.Credential{Uid: uint32(r.uid), Gid: uint32(r.gid)}
	}
	return attr
}
