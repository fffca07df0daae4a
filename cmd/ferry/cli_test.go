package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// cliRun is the built ferry binary and the Ferry its commands talk to.
type cliRun struct {
	bin string
	env *ferrytest.Env
}

// newCLIRun builds cmd/ferry into the test's directory and starts a Ferry.
func newCLIRun(t *testing.T) *cliRun {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ferry")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return &cliRun{bin: bin, env: ferrytest.Start(t)}
}

func (r *cliRun) command(stdin string, args ...string) *exec.Cmd {
	cmd := exec.Command(r.bin, args...)
	cmd.Env = append(os.Environ(), "FERRY_URL="+r.env.URL, "FERRY_KEY="+ferrytest.AdminKey)
	cmd.Stdin = strings.NewReader(stdin)
	return cmd
}

// run runs the binary with args (stdin as its input) and returns its
// stdout, stderr and exit code.
func (r *cliRun) run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := r.command(stdin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), errOut.String(), exit.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errOut.String(), 0
}

// ok runs a command that must exit 0 and returns its stdout.
func (r *cliRun) ok(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, code := r.run(t, stdin, args...)
	require.Equal(t, 0, code, "ferry %s: %s", strings.Join(args, " "), errOut)
	return out
}

// okJSON runs a command with --output json and decodes its stdout into v.
func (r *cliRun) okJSON(t *testing.T, v any, stdin string, args ...string) {
	t.Helper()
	out := r.ok(t, stdin, append(args, "--output", "json")...)
	require.NoError(t, json.Unmarshal([]byte(out), v), "%s", out)
}

// rows is the table output's lines split into cells (header first).
func rows(out string) [][]string {
	var rs [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		rs = append(rs, strings.Fields(l))
	}
	return rs
}

// TestCLI runs every command of the CLI as the built binary against a
// real Ferry (one build, one server, a subtest per noun and command).
func TestCLI(t *testing.T) {
	r := newCLIRun(t)
	t.Run("queue", func(t *testing.T) { testCLIQueue(t, r) })
	t.Run("topic", func(t *testing.T) { testCLITopic(t, r) })
	t.Run("sub", func(t *testing.T) { testCLISub(t, r) })
	t.Run("group", func(t *testing.T) { testCLIGroup(t, r) })
	t.Run("key", func(t *testing.T) { testCLIKey(t, r) })
	t.Run("usage", func(t *testing.T) { testCLIUsage(t, r) })
	t.Run("completion", func(t *testing.T) { testCLICompletion(t, r) })
}

// testCLIUsage: a wrong command line exits 2 and says why; help exits 0;
// a Ferry that does not answer is a failure (1).
func testCLIUsage(t *testing.T, r *cliRun) {
	for _, args := range [][]string{
		{"queue"}, {"queue", "frob"}, {"queue", "get"}, {"queue", "get", "a", "b"},
		{"queue", "ls", "--output", "yaml"}, {"queue", "ls", "--nope"},
		{"queue", "dead-letters", "redrive", "q"}, {"key", "create", "k"}, {"frobnicate"}, {},
	} {
		_, errOut, code := r.run(t, "", args...)
		require.Equal(t, 2, code, "ferry %v: %s", args, errOut)
		require.NotEmpty(t, errOut)
	}
	_, errOut, code := r.run(t, "", "queue", "ls", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, errOut, "usage: ferry queue ls")
	cmd := r.command("", "queue", "ls")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), "FERRY_URL")
	_, errOut, code = r.run(t, "", "queue", "ls", "--url", "http://127.0.0.1:1")
	require.Equal(t, 1, code, "no Ferry answers: a failure, not a usage error")
	require.Contains(t, errOut, "connection refused")
}
