package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicationRole is the role a standby streams from its primary as: LOGIN
// and REPLICATION, no superuser. initdb's default pg_hba.conf already lets
// every role open replication connections from 127.0.0.1 (with the trust
// authentication Start uses); a real deployment needs a
// `host replication ferry_replicator <standby address> scram-sha-256` line.
const ReplicationRole = "ferry_replicator"

// StandbyOptions configure StartStandby.
type StandbyOptions struct {
	// DataDir is the standby's data directory; it must not exist yet or
	// be empty. Required.
	DataDir string

	// Name is the standby's application_name, by which the primary's
	// synchronous_standby_names names it and pg_stat_replication shows
	// it. Letters, digits and underscores; default "standby".
	Name string

	// Port is the standby's TCP port on 127.0.0.1; zero picks a free one.
	Port int

	// Settings are extra server settings for the standby, as in Options.
	Settings map[string]string

	// Logf, if set, receives progress lines.
	Logf func(format string, args ...any)
}

// standbyName is what StartStandby accepts as an application_name (it is
// written into synchronous_standby_names as a quoted identifier).
var standbyName = regexp.MustCompile(`^[A-Za-z0-9_]{1,63}$`)

// StartStandby makes a synchronous streaming standby of c and starts it.
// c must be a Durable cluster started by this process (synchronous_commit
// on) with wal_level replica or logical and max_wal_senders above zero
// (PostgreSQL's defaults for both).
//
// On c it creates ReplicationRole and sets, with ALTER SYSTEM (written to
// postgresql.auto.conf), synchronous_standby_names to the standby's Name;
// it copies c with `pg_basebackup --write-recovery-conf --wal-method stream`
// as ReplicationRole with application_name Name (so the standby gets
// standby.signal and a primary_conninfo naming itself), starts the copy,
// reloads c's configuration and waits until c's pg_stat_replication shows
// the standby streaming with sync_state "sync". From then on every commit
// on c returns only after the standby has flushed its WAL.
//
// The copy carries c's postgresql.auto.conf, so the standby has the same
// synchronous_standby_names, as a standby configured like its primary
// does. That is harmless while it is a standby and fatal once it is
// promoted (every commit would wait for a standby that does not exist):
// Promote clears it.
func (c *Cluster) StartStandby(ctx context.Context, opts StandbyOptions) (*Cluster, error) {
	if c.run == nil {
		return nil, errors.New("pgcluster: StartStandby needs a cluster started by this process, not a reused one")
	}
	if opts.DataDir == "" {
		return nil, errors.New("pgcluster: StandbyOptions.DataDir is required")
	}
	if opts.Name == "" {
		opts.Name = "standby"
	}
	if !standbyName.MatchString(opts.Name) {
		return nil, fmt.Errorf("pgcluster: invalid standby name %q (letters, digits, underscores)", opts.Name)
	}
	logf := opts.Logf
	if logf == nil {
		logf = c.logf
	}
	dataDir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if err := c.prepareReplication(ctx, opts.Name); err != nil {
		return nil, err
	}
	if err := c.baseBackup(ctx, dataDir, opts.Name, logf); err != nil {
		return nil, err
	}
	standby, err := Start(ctx, Options{DataDir: dataDir, Port: opts.Port, Durable: true, Settings: opts.Settings, Logf: logf})
	if err != nil {
		return nil, err
	}
	if err := c.waitSync(ctx, opts.Name); err != nil {
		_ = standby.Stop(context.Background())
		return nil, err
	}
	logf("pgcluster: standby %q on 127.0.0.1:%d streams synchronously from 127.0.0.1:%d", opts.Name, standby.port, c.port)
	return standby, nil
}

// prepareReplication checks that c can stream WAL, creates ReplicationRole
// and names the standby in synchronous_standby_names (not yet reloaded: a
// commit must not wait for a standby that does not exist yet).
func (c *Cluster) prepareReplication(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: connect to the primary: %w", err)
	}
	defer conn.Close(context.Background())
	var walLevel, syncCommit string
	var senders int
	if err := conn.QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('synchronous_commit'),
		current_setting('max_wal_senders')::int`).Scan(&walLevel, &syncCommit, &senders); err != nil {
		return fmt.Errorf("pgcluster: read the primary's settings: %w", err)
	}
	if walLevel == "minimal" || senders == 0 || syncCommit != "on" {
		return fmt.Errorf("pgcluster: the primary cannot have a synchronous standby with wal_level=%s, "+
			"max_wal_senders=%d, synchronous_commit=%s (start it Durable, wal_level=replica, max_wal_senders > 0)",
			walLevel, senders, syncCommit)
	}
	_, err = conn.Exec(ctx, `DO $$ BEGIN
		CREATE ROLE `+ReplicationRole+` LOGIN REPLICATION;
	EXCEPTION WHEN duplicate_object THEN NULL; END $$`)
	if err != nil {
		return fmt.Errorf("pgcluster: create role %s: %w", ReplicationRole, err)
	}
	if _, err := conn.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '"`+name+`"'`); err != nil {
		return fmt.Errorf("pgcluster: set synchronous_standby_names: %w", err)
	}
	return nil
}

// baseBackup copies c into dataDir as a standby of c named name.
func (c *Cluster) baseBackup(ctx context.Context, dataDir, name string, logf func(string, ...any)) error {
	begin := time.Now()
	if err := c.run.prepareDir(dataDir, logf); err != nil {
		return fmt.Errorf("pgcluster: standby data directory: %w", err)
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=%s", c.port, ReplicationRole, name)
	out, err := c.run.command(ctx, filepath.Join(c.binDir, "pg_basebackup"),
		"--pgdata", dataDir,
		"--dbname", conninfo,
		"--write-recovery-conf",
		"--wal-method", "stream",
		"--checkpoint", "fast",
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: pg_basebackup into %s: %w\n%s", dataDir, err, strings.TrimSpace(string(out)))
	}
	logf("pgcluster: pg_basebackup of 127.0.0.1:%d into %s (%s)", c.port, dataDir, time.Since(begin).Round(time.Millisecond))
	return nil
}

// waitSync reloads c's configuration (making synchronous_standby_names
// take effect) and waits until the standby streams as the synchronous one.
func (c *Cluster) waitSync(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: connect to the primary: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("pgcluster: reload the primary: %w", err)
	}
	for {
		var state, syncState string
		err := conn.QueryRow(ctx, `SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1`,
			name).Scan(&state, &syncState)
		if err == nil && state == "streaming" && syncState == "sync" {
			return nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pgcluster: read pg_stat_replication: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: standby %q is not a streaming synchronous standby (state %q, sync_state %q): %w",
				name, state, syncState, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Promote makes a standby the primary, in three steps:
//
//  1. ALTER SYSTEM SET synchronous_standby_names to the empty string
//     (allowed on a standby: it only writes postgresql.auto.conf). The
//     promoted server has no standby of its own, and with the setting it
//     copied from the old primary every commit would wait for one forever.
//  2. pg_ctl promote --wait: the standby replays the WAL it has, which
//     holds every commit the old primary acknowledged, and starts
//     accepting writes.
//  3. pg_reload_conf(), which applies step 1 and releases any commit that
//     began waiting in the moment between 2 and 3.
//
// The reload comes after the promotion, not before, because PostgreSQL 15
// can miss a promote request that arrives while a reload has just woken
// the standby to retry its dead primary; it then notices the request only
// after wal_retrieve_retry_interval (5 s). Give the new primary a standby
// of its own and name it in synchronous_standby_names again to be
// protected from the next failure.
func (c *Cluster) Promote(ctx context.Context) error {
	if c.run == nil {
		return errors.New("pgcluster: Promote needs a cluster started by this process, not a reused one")
	}
	begin := time.Now()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: connect to the standby: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = ''`); err != nil {
		return fmt.Errorf("pgcluster: clear synchronous_standby_names: %w", err)
	}
	out, err := c.run.command(ctx, filepath.Join(c.binDir, "pg_ctl"), "promote",
		"--pgdata", c.dataDir, "--wait", "--timeout", "60").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: promote %s: %w\n%s", c.dataDir, err, strings.TrimSpace(string(out)))
	}
	if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("pgcluster: reload the promoted standby: %w", err)
	}
	c.logf("pgcluster: promoted 127.0.0.1:%d (%s)", c.port, time.Since(begin).Round(time.Millisecond))
	return nil
}

// Kill stops the server as a crash of its machine would: SIGKILL to the
// postmaster and to every process it started (each backend runs in a
// session of its own, so there is no group to signal: Kill stops the
// postmaster with SIGSTOP, so that it forks no more, reads its children
// from /proc, then kills them all), so that no backend finishes a last
// commit after the kill and no client gets a goodbye. Where /proc is
// missing only the postmaster is killed, and its backends exit by
// themselves when they notice. Kill returns when all of them are gone;
// the cluster is then stopped and Stop does nothing. Restarting the data
// directory with Start would recover it from its WAL; after a failover it
// must not come back as a second primary.
func (c *Cluster) Kill() error {
	if c.run == nil {
		return errors.New("pgcluster: Kill needs a cluster started by this process, not a reused one")
	}
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("pgcluster: kill: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return fmt.Errorf("pgcluster: kill: postmaster.pid: %w", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgcluster: stop PID %d: %w", pid, err)
	}
	children := childrenOf(pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgcluster: kill PID %d: %w", pid, err)
	}
	for _, child := range children {
		_ = syscall.Kill(child, syscall.SIGKILL) // it may have exited already
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range append(children, pid) {
		for ProcessAlive(p) && !zombie(p) {
			if time.Now().After(deadline) {
				return fmt.Errorf("pgcluster: PID %d still runs 30 s after SIGKILL", p)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	c.stopOnce.Do(func() { c.removeSocketDir() })
	c.logf("pgcluster: killed PostgreSQL on 127.0.0.1:%d (PID %d and its %d children)", c.port, pid, len(children))
	return nil
}

// procStat returns the fields of /proc/PID/stat after the command name:
// state, ppid, pgrp, ... (nil where there is no such file).
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := strings.LastIndex(string(b), ") ")
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b)[i+2:])
}

// childrenOf returns the PIDs of the processes whose parent is pid (none
// without /proc).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(child); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// zombie reports whether pid has exited but not been reaped (its parent,
// after pg_ctl daemonised it, is init or a subreaper). Linux only; false
// elsewhere.
func zombie(pid int) bool {
	f := procStat(pid)
	return len(f) > 0 && f[0] == "Z"
}
