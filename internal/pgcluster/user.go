package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// serverUser is the unprivileged user the server runs as when Start is
// called by root.
const serverUser = "postgres"

// runner runs the PostgreSQL programs: directly, or, for root, as serverUser.
type runner struct {
	asUser   bool   // run as serverUser
	runuser  string // path of runuser; "" → su
	uid, gid int    // serverUser's ids, when asUser
}

// newRunner returns a runner for the current user, creating serverUser when
// running as root and it does not exist yet.
func newRunner(ctx context.Context, logf func(string, ...any)) (*runner, error) {
	if os.Geteuid() != 0 {
		return &runner{}, nil
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		if err := createUser(ctx, logf); err != nil {
			return nil, err
		}
		if u, err = user.Lookup(serverUser); err != nil {
			return nil, fmt.Errorf("look up user %s after creating it: %w", serverUser, err)
		}
	}
	r := &runner{asUser: true}
	if r.uid, err = strconv.Atoi(u.Uid); err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", serverUser, u.Uid, err)
	}
	if r.gid, err = strconv.Atoi(u.Gid); err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", serverUser, u.Gid, err)
	}
	if p, err := exec.LookPath("runuser"); err == nil {
		r.runuser = p
	} else if _, err := exec.LookPath("su"); err != nil {
		return nil, errors.New("running as root, and neither runuser nor su is installed to run PostgreSQL as user " + serverUser)
	}
	return r, nil
}

// createUser adds serverUser as a system user, in a group of its own (or in
// an existing group of that name).
func createUser(ctx context.Context, logf func(string, ...any)) error {
	args := []string{"--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/false"}
	if _, err := user.LookupGroup(serverUser); err == nil {
		args = append(args, "--gid", serverUser)
	} else {
		args = append(args, "--user-group")
	}
	args = append(args, serverUser)
	out, err := exec.CommandContext(ctx, "useradd", args...).CombinedOutput()
	if err != nil {
		// Another process may have created it at the same moment.
		if _, lookErr := user.Lookup(serverUser); lookErr == nil {
			return nil
		}
		return fmt.Errorf("PostgreSQL cannot run as root and creating user %s failed: useradd: %w: %s",
			serverUser, err, strings.TrimSpace(string(out)))
	}
	logf("pgcluster: created system user %s to run PostgreSQL (it refuses to run as root)", serverUser)
	return nil
}

// command returns a command running the program at path with args, as
// serverUser when needed.
func (r *runner) command(ctx context.Context, path string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	switch {
	case !r.asUser:
		cmd = exec.CommandContext(ctx, path, args...)
	case r.runuser != "":
		cmd = exec.CommandContext(ctx, r.runuser, append([]string{"-u", serverUser, "--", path}, args...)...)
	default:
		// su runs its command through a shell, so quote every word.
		words := []string{shellQuote(path)}
		for _, a := range args {
			words = append(words, shellQuote(a))
		}
		cmd = exec.CommandContext(ctx, "su", "-s", "/bin/sh", "-c", strings.Join(words, " "), serverUser)
	}
	if r.asUser {
		// The caller's working directory (say /root/project) may be closed
		// to serverUser.
		cmd.Dir = "/"
	}
	// pg_ctl's server does not keep our output pipes, but if anything ever
	// does, do not hang on it.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// prepareDir makes dir (and missing parents) for a data or socket directory
// owned by the user running the server, reachable by that user.
func (r *runner) prepareDir(dir string, logf func(string, ...any)) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if !r.asUser {
		return nil
	}
	if err := os.Chown(dir, r.uid, r.gid); err != nil {
		return err
	}
	return makeTraversable(filepath.Dir(dir), logf)
}

// makeTraversable adds o+x to dir and each of its ancestors that lack it,
// so that serverUser can reach a directory below them.
func makeTraversable(dir string, logf func(string, ...any)) error {
	for {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if perm := fi.Mode().Perm(); perm&0o001 == 0 {
			if err := os.Chmod(dir, fi.Mode()|0o001); err != nil {
				return fmt.Errorf("make %s traversable for user %s: %w", dir, serverUser, err)
			}
			logf("pgcluster: chmod o+x %s so user %s can reach the data directory", dir, serverUser)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

// shellQuote quotes s as one word for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
