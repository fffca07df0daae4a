package pgcluster

import "syscall"

// bouncerProcAttr runs PgBouncer as the runner's user and kills it when
// this process dies (a test binary killed by its timeout leaves no
// PgBouncer behind).
func bouncerProcAttr(r *runner) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if r.asUser {
		attr.Credential = &syscall.Credential{Uid: uint32(r.uid), Gid: uint32(r.gid)}
	}
	return attr
}
