package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNotInstalled is wrapped by the error Start returns when no PostgreSQL
// server binaries (initdb, pg_ctl) can be found on the machine.
var ErrNotInstalled = errors.New("PostgreSQL is not installed")

// debianRoot is where Debian and Ubuntu install one directory per major
// version, with the server binaries in VERSION/bin, off PATH.
const debianRoot = "/usr/lib/postgresql"

// BinDir returns the directory of the machine's PostgreSQL binaries (the
// one Start uses: initdb, pg_ctl, and psql beside them).
func BinDir() (string, error) { return findBinDir(os.Getenv("PATH"), debianRoot) }

// findBinDir returns the directory holding initdb and pg_ctl. pathEnv is a
// PATH value and root is the Debian-style version directory; both are
// parameters so the search can be tested.
func findBinDir(pathEnv, root string) (string, error) {
	if pgConfig := lookPath(pathEnv, "pg_config"); pgConfig != "" {
		// A client-only install (libpq-dev) has pg_config but its bindir may
		// lack the server: check, and fall through when it does.
		out, err := exec.Command(pgConfig, "--bindir").Output()
		if dir := strings.TrimSpace(string(out)); err == nil && hasServer(dir) {
			return dir, nil
		}
	}
	if dir := newestVersionDir(root); dir != "" {
		return dir, nil
	}
	if initdb := lookPath(pathEnv, "initdb"); initdb != "" {
		// Resolve symlinks so pg_ctl finds the postgres next to the real
		// initdb (/usr/local/bin/initdb may point into a versioned dir).
		if real, err := filepath.EvalSymlinks(initdb); err == nil && hasServer(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if hasServer(filepath.Dir(initdb)) {
			return filepath.Dir(initdb), nil
		}
	}
	return "", fmt.Errorf("%w: no initdb and pg_ctl in `pg_config --bindir`, %s/*/bin or PATH; "+
		"install it with `apt-get install -y postgresql` (Debian/Ubuntu) or `brew install postgresql` (macOS)",
		ErrNotInstalled, root)
}

// newestVersionDir returns root/VERSION/bin for the highest numeric VERSION
// that has the server binaries, or "".
func newestVersionDir(root string) string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return ""
	}
	type version struct {
		major, minor int
		dir          string
	}
	var versions []version
	for _, e := range entries {
		// Versions are "15", or "9.6" before PostgreSQL 10.
		majorStr, minorStr, _ := strings.Cut(e.Name(), ".")
		major, err := strconv.Atoi(majorStr)
		if err != nil {
			continue
		}
		minor, _ := strconv.Atoi(minorStr)
		dir := filepath.Join(root, e.Name(), "bin")
		if hasServer(dir) {
			versions = append(versions, version{major, minor, dir})
		}
	}
	if len(versions) == 0 {
		return ""
	}
	newest := slices.MaxFunc(versions, func(a, b version) int {
		if a.major != b.major {
			return a.major - b.major
		}
		return a.minor - b.minor
	})
	return newest.dir
}

// hasServer reports whether dir holds initdb, pg_ctl and postgres.
func hasServer(dir string) bool {
	if dir == "" {
		return false
	}
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if !isExecutable(filepath.Join(dir, name)) {
			return false
		}
	}
	return true
}

// lookPath is exec.LookPath over an explicit PATH value.
func lookPath(pathEnv, name string) string {
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			continue
		}
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
