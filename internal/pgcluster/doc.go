// Package pgcluster runs a private PostgreSQL cluster from the PostgreSQL
// already installed on the machine. `ferry dev` uses it for a persistent
// development database (./.ferry/pg) and the tests use it, through
// internal/testkit/pgtest, for a throwaway one; both go through Start.
//
// # Binaries
//
// The server binaries are found, in order, in `pg_config --bindir` (when
// pg_config is on PATH and that directory has initdb and pg_ctl), in the
// highest version under /usr/lib/postgresql/*/bin (Debian and Ubuntu keep
// them off PATH), or as initdb and pg_ctl on PATH. When none is found Start
// returns an error wrapping ErrNotInstalled that says how to install
// PostgreSQL.
//
// # Data directory
//
// Start runs initdb when the data directory has no PG_VERSION file (trust
// authentication, superuser "postgres", UTF8, C locale), then starts the
// server with pg_ctl. The server listens on 127.0.0.1 only, logs to
// DATADIR/postgresql.log, and puts its Unix socket in the data directory, or
// in a short directory under /tmp when the data directory's path is too long
// for a socket address (about 100 bytes). Settings are passed on the command
// line on every start, never written to postgresql.conf, so one data
// directory can be started durable one day and not the next.
//
// A cluster that is not Durable runs with fsync, synchronous_commit and
// full_page_writes off, and initdb skips its final sync: fast, and a crash of
// the machine may corrupt it. Use it only for data that can be thrown away.
//
// # Reuse
//
// When the data directory already has a running postmaster (postmaster.pid
// names a live process and its port answers), Start does not start a second
// one: it returns a Cluster for the running server, with the port read from
// postmaster.pid, and Reused reports true. Stop on a reused cluster does
// nothing; only the Start call that started the server owns it, so one
// `ferry dev` can share its database with another without pulling it away.
// A stale postmaster.pid (its process gone) is left to pg_ctl, which starts
// the server anyway.
//
// # Standbys and failover
//
// For failover tests, Cluster.StartStandby gives a Durable cluster a
// synchronous streaming standby (pg_basebackup --write-recovery-conf as a
// replication role, then synchronous_standby_names on the primary naming
// the standby's application_name, and a wait until pg_stat_replication
// shows it streaming with sync_state "sync"); Cluster.Kill stops every
// process of a server with SIGKILL, as a crash of its machine would; and
// Cluster.Promote makes the standby the primary, emptying the
// synchronous_standby_names it inherited so that its commits do not wait
// for a standby that is gone. StartStandby and Promote are the procedure
// an operator follows; their comments say why each step is there.
//
// # Running as root
//
// PostgreSQL refuses to run as root, and CI machines and containers often do.
// When the effective user is root, Start runs initdb, pg_ctl and so the server
// as the system user "postgres" (creating it with useradd --system when it
// does not exist) through `runuser -u postgres --`, or `su -s /bin/sh -c`
// where runuser is missing. It makes the data directory belong to that user,
// and adds o+x (traverse, not list) to every ancestor directory that lacks it,
// so the server can reach its data directory; a data directory under /root
// therefore makes /root traversable, which Start reports through Logf. Put
// throwaway clusters under os.TempDir to avoid touching anything.
//
// # PgBouncer
//
// StartBouncer runs PgBouncer (found on PATH or in /usr/sbin, where Debian
// puts it; ErrBouncerNotInstalled says how to install it) in front of a
// cluster, for tests of Ferry behind a transaction pooler: every database
// of the cluster under its own name, trust authentication like the
// cluster's, the pool mode and default_pool_size asked for, on a free
// 127.0.0.1 port, in the foreground as a child of the calling process
// (killed with it on Linux), logging to its directory. PgBouncer refuses
// to run as root too: as root it runs as the cluster's user.
package pgcluster
