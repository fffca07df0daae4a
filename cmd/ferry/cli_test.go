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

// testCLIQueue: every queue command, in both output forms.
func testCLIQueue(t *testing.T, r *cliRun) {
	t.Run("create", func(t *testing.T) {
		out := r.ok(t, "", "queue", "create", "orders", "--max-receives", "2", "--retry-min", "0", "--retry-max", "0")
		require.Contains(t, out, "max_receives                2")
		var q struct {
			Name              string `json:"name"`
			VisibilityTimeout int    `json:"visibility_timeout_seconds"`
		}
		r.okJSON(t, &q, "", "queue", "create", "orders", "--visibility-timeout", "45")
		require.Equal(t, "orders", q.Name)
		require.Equal(t, 45, q.VisibilityTimeout)
	})
	t.Run("send", func(t *testing.T) {
		out := r.ok(t, "", "queue", "send", "orders", `{"n": 1}`, "--attr", "kind=test", "--dedup-id", "d1")
		require.Equal(t, []string{"ID", "DUPLICATE"}, rows(out)[0])
		require.Equal(t, "false", rows(out)[1][1])
		var sent []struct{ Duplicate bool }
		r.okJSON(t, &sent, "", "queue", "send", "orders", `{"n": 1}`, "--dedup-id", "d1")
		require.True(t, sent[0].Duplicate)
		r.okJSON(t, &sent, "{\"n\": 2}\nplain text\n\n[3]\n", "queue", "send", "orders")
		require.Len(t, sent, 3, "one message per non-empty line of stdin")
	})
	t.Run("get", func(t *testing.T) {
		var q struct{ Stats struct{ Available int } }
		r.okJSON(t, &q, "", "queue", "get", "orders")
		require.Equal(t, 4, q.Stats.Available)
		require.Contains(t, r.ok(t, "", "queue", "get", "orders"), "available                   4")
	})
	t.Run("ls", func(t *testing.T) {
		out := r.ok(t, "", "queue", "ls")
		require.Equal(t, []string{"orders", "4", "0", "0", "0"}, rows(out)[1][:5])
	})
	t.Run("receive", func(t *testing.T) {
		var ms []struct {
			Body       json.RawMessage
			Attributes map[string]string
		}
		r.okJSON(t, &ms, "", "queue", "receive", "orders", "--ack")
		require.JSONEq(t, `{"n": 1}`, string(ms[0].Body))
		require.Equal(t, "test", ms[0].Attributes["kind"])
		out := r.ok(t, "", "queue", "receive", "orders", "--max", "10", "--visibility-timeout", "1")
		require.Len(t, rows(out), 4, "a header and three messages")
		require.Contains(t, out, `"plain text"`)
	})
	t.Run("dead-letters", func(t *testing.T) {
		var ms []struct{ Receipt string }
		r.okJSON(t, &ms, "", "queue", "receive", "orders", "--max", "10", "--wait", "5")
		require.NotEmpty(t, ms)
		// The claims above lasted a second; nack the messages to the dead letters.
		for _, m := range ms {
			r.env.Do("POST", "/v1/queues/orders/nack", map[string]any{"receipts": []string{m.Receipt}, "dead_letter": true})
		}
		var dl []struct{ ID string }
		r.okJSON(t, &dl, "", "queue", "dead-letters", "ls", "orders")
		require.Len(t, dl, len(ms))
		out := r.ok(t, "", "queue", "dead-letters", "redrive", "orders", "--id", dl[0].ID)
		require.Contains(t, out, "redriven  1")
		r.ok(t, "", "queue", "dead-letters", "purge", "orders")
		r.okJSON(t, &dl, "", "queue", "dead-letters", "ls", "orders")
		require.Empty(t, dl)
	})
	t.Run("purge", func(t *testing.T) {
		require.Contains(t, r.ok(t, "", "queue", "purge", "orders"), "purged queue orders")
		var q struct {
			Stats struct{ Available, InFlight int }
		}
		r.okJSON(t, &q, "", "queue", "get", "orders")
		require.Zero(t, q.Stats.Available+q.Stats.InFlight)
	})
	t.Run("delete", func(t *testing.T) {
		r.ok(t, "", "queue", "delete", "orders")
		_, errOut, code := r.run(t, "", "queue", "get", "orders")
		require.Equal(t, 1, code, "a problem is a failure")
		require.Contains(t, errOut, "404 not_found")
	})
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

// testCLICompletion: the bash completion script completes nouns, verbs
// and flags.
func testCLICompletion(t *testing.T, r *cliRun) {
	script := r.ok(t, "", "completion", "bash")
	check := func(words string, cword int, want string) {
		probe := script + "\nCOMP_WORDS=(" + words + "); COMP_CWORD=" + string(rune('0'+cword)) + "; _ferry; echo \"${COMPREPLY[*]}\"\n"
		out, err := exec.Command("bash", "-c", probe).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, want, strings.TrimSpace(string(out)), "completing %s", words)
	}
	check(`ferry q`, 1, "queue")
	check(`ferry queue ""`, 2, "create dead-letters delete get ls purge receive send")
	check(`ferry queue dead-letters r`, 3, "redrive")
	check(`ferry topic t`, 2, "tail")
	check(`ferry queue get orders --o`, 4, "--output")
	_, _, code := r.run(t, "", "completion", "fish")
	require.Equal(t, 2, code)
}
