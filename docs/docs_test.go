//go:build unix

// Package docs_test runs every command of README.md and docs/*.md against
// a real Ferry, so that none can go stale.
//
// Each fenced block is one of: a shell block (sh, bash, shell, console),
// whose commands bash runs in order, one bash per file, with FERRY_URL and
// FERRY_KEY set as `make dev` prints them; a python block, which python3
// runs in that bash (boto3 must be importable); a javascript block, which
// node runs in that bash as an ES module in docs/testdata (whose pinned
// packages `npm ci --prefix docs/testdata` installs: .ci/run does); a sql
// block, which psql runs on Ferry's database; or a listing (go, json,
// yaml, text, http), never run. A block the test could run that cannot
// run in a test (it starts a long-lived server, installs packages, needs
// another machine) is marked by a `<!-- not run: reason -->` line just
// before it; any other block that is not run fails the test, as does a
// block without a language.
//
// Every command must exit 0. Its requests go through a proxy that checks
// each response against openapi/openapi.yaml (the SQS face's, which the
// spec does not describe, pass with their Host kept for SigV4) and fails
// a command whose requests are answered 4xx or 5xx, unless the answer the
// docs show for it is a problem with that status. Where the docs show an answer (`# → ...`
// after the command, see answer_test.go) the output must match it in
// shape.
//
// One Ferry serves every file, configured as `ferry dev` is (push may
// reach 127.0.0.1, a server key seals the secrets of keys for SQS); the files run one after another, README.md first,
// each in a fresh bash, so a page's examples must not depend on another
// page's.
package docs_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// commandTimeout bounds one command: the longest long poll the docs show
// is 20 s.
const commandTimeout = 60 * time.Second

// docsRun is what the files' commands run against.
type docsRun struct {
	root  string // the repository root, every command's working directory
	env   *ferrytest.Env
	proxy *proxy
}

func TestDocs(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	for _, tool := range []string{"bash", "curl", "jq", "python3"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the docs' commands need %s (apt-get install -y %s)", tool, tool)
	}
	out, err := exec.Command("python3", "-c", "import boto3").CombinedOutput()
	require.NoError(t, err, "the docs' python blocks need boto3 for the python3 on PATH "+
		"(apt-get install -y python3-boto3, or pip install boto3; .ci/run installs it): %s", out)
	_, err = exec.LookPath("node")
	require.NoError(t, err, "the docs' javascript blocks need node (apt-get install -y nodejs npm)")
	_, err = os.Stat(filepath.Join(root, "docs", "testdata", "node_modules", "@aws-sdk", "client-sqs", "package.json"))
	require.NoError(t, err, "the docs' javascript blocks need the packages of docs/testdata: npm ci --prefix docs/testdata (.ci/run runs it)")
	all, errs := readBlocks(root)
	require.NoError(t, errors.Join(errs...), "every code block names its language, and one that is not run says why")
	files, err := docFiles(root)
	require.NoError(t, err)

	// As `ferry dev` serves: push may reach this machine's receivers, and a
	// server key seals the secrets of the keys made, so they sign SQS
	// requests.
	secretKey := make([]byte, 32)
	_, err = rand.Read(secretKey)
	require.NoError(t, err)
	env := ferrytest.Start(t, func(c *server.Config) {
		c.AllowPrivatePush, c.SecretKey = true, base64.StdEncoding.EncodeToString(secretKey)
	})
	d := &docsRun{root: root, env: env, proxy: startProxy(t, env.URL)}
	for _, f := range files {
		t.Run(f, func(t *testing.T) { d.runFile(t, all[f]) })
	}
	t.Run("every metric is in docs/metrics.md", func(t *testing.T) { checkMetricsDocumented(t, env) })
	for _, f := range files {
		for _, b := range all[f] {
			if b.marked {
				t.Logf("not run: %s (%s): %s", where(b.file, b.line), b.lang, b.reason)
			}
		}
	}
}

// runFile runs the file's blocks in order, its shell blocks in one bash.
// The first command that fails ends the file.
func (d *docsRun) runFile(t *testing.T, blocks []block) {
	var sh *shell
	ran := 0
	for _, b := range blocks {
		switch {
		case b.marked:
		case slices.Contains(shellLangs, b.lang):
			if sh == nil {
				sh = d.startShell(t)
			}
			cmds, err := splitCommands(b)
			require.NoError(t, err)
			for _, c := range cmds {
				d.runCommand(t, sh, b, c)
			}
			ran += len(cmds)
		case b.lang == "sql":
			d.runSQL(t, b)
			ran++
		case b.lang == "python" || b.lang == "javascript":
			if sh == nil {
				sh = d.startShell(t)
			}
			d.runCommand(t, sh, b, programCommand(b))
			ran++
		}
	}
	t.Logf("%d commands and SQL blocks ran", ran)
}

// programCommand is a python or javascript block as one command of the
// file's bash: python3, or node as an ES module, reading the block from a
// heredoc, so that it sees the variables the shell blocks before it
// exported. node runs in docs/testdata, where its imports resolve (an ES
// module read from stdin resolves them from the working directory; it
// ignores NODE_PATH). The block's answer lines (`# →`, `// →`), in order,
// are the answer its output must match.
func programCommand(b block) command {
	var expect []string
	for _, l := range strings.Split(b.text, "\n") {
		if answer, ok := answerLine(b.lang, strings.TrimSpace(l)); ok {
			expect = append(expect, answer)
		}
	}
	run := "python3 -"
	if b.lang == "javascript" {
		run = "(cd docs/testdata && node --input-type=module)"
	}
	return command{line: b.line + 1, text: run + " <<'FERRY_PROGRAM_BLOCK'\n" + b.text + "FERRY_PROGRAM_BLOCK\n", expect: strings.Join(expect, "\n")}
}

// runCommand runs one command of block b and checks its exit status, the
// statuses of its requests and its output against the answer shown.
func (d *docsRun) runCommand(t *testing.T, sh *shell, b block, c command) {
	t.Helper()
	at := where(b.file, c.line)
	d.proxy.begin(t)
	started := time.Now()
	res, err := sh.run(c.text)
	seen := d.proxy.end()
	require.NoError(t, err, "%s: %s", at, c.text)
	report := fmt.Sprintf("%s: %s\nexit status %d, %s\nstdout: %s\nstderr: %s",
		at, strings.TrimSpace(c.text), res.code, time.Since(started).Round(time.Millisecond), res.stdout, res.stderr)
	require.Zero(t, res.code, report)
	if took := time.Since(started); took > time.Second {
		t.Logf("%s: took %s", at, took.Round(time.Millisecond))
	}
	want := problemStatus(c.expect)
	for _, x := range seen {
		if x.status >= 400 && x.status != want {
			require.Failf(t, "a request failed", "%s %s → %d\n%s", x.method, x.path, x.status, report)
		}
	}
	if want != 0 {
		require.True(t, slices.ContainsFunc(seen, func(x exchange) bool { return x.status == want }),
			"the answer shown is a %d problem, and no request got it\n%s", want, report)
	}
	if c.expect != "" {
		require.NoError(t, matchAnswer(c.expect, res.stdout), report)
	}
}

// runSQL runs a sql block with psql on Ferry's database, stopping at
// the first error.
func (d *docsRun) runSQL(t *testing.T, b block) {
	t.Helper()
	dir, err := pgcluster.BinDir()
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(dir, "psql"), "--no-psqlrc", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", d.env.DatabaseURL)
	cmd.Stdin = strings.NewReader(b.text)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: psql:\n%s\n%s", where(b.file, b.line), b.text, out)
}

// shell is one bash that runs a file's commands one at a time, so that
// what a command sets (a variable, a function) the next ones see.
type shell struct {
	cmd    *exec.Cmd
	stdin  *os.File
	status chan string          // the lines bash writes to its stdout: one per command, its exit status
	stderr *ferrytest.LogBuffer // bash's own complaints
	dir    string               // where each command's output goes
	n      int                  // commands run
}

// result is what a command did.
type result struct {
	code           int
	stdout, stderr string
}

// startShell starts the file's bash in the repository root, with the
// environment of this process but Ferry's own variables, and FERRY_URL
// and FERRY_KEY naming the Ferry the docs run against. It runs in a
// process group of its own, which is killed at the end of the test,
// with whatever a command left running in the background.
func (d *docsRun) startShell(t *testing.T) *shell {
	t.Helper()
	s := &shell{status: make(chan string, 16), dir: t.TempDir(), stderr: &ferrytest.LogBuffer{}}
	s.cmd = exec.Command("bash", "--noprofile", "--norc", "-o", "pipefail", "-s")
	s.cmd.Dir = d.root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FERRY_") {
			s.cmd.Env = append(s.cmd.Env, kv)
		}
	}
	s.cmd.Env = append(s.cmd.Env, "FERRY_URL="+d.proxy.url, "FERRY_KEY="+ferrytest.AdminKey)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, w, err := os.Pipe()
	require.NoError(t, err)
	r, out, err := os.Pipe()
	require.NoError(t, err)
	s.cmd.Stdin, s.stdin, s.cmd.Stdout, s.cmd.Stderr = in, w, out, s.stderr
	require.NoError(t, s.cmd.Start())
	require.NoError(t, in.Close())
	require.NoError(t, out.Close())
	go func() {
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			s.status <- sc.Text()
		}
		close(s.status)
	}()
	t.Cleanup(s.stop)
	return s
}

// run runs one command in the shell, its stdout and stderr to files of
// their own (a background job keeps writing to its command's files) and
// its stdin from /dev/null (bash reads the next commands from its own).
func (s *shell) run(text string) (result, error) {
	s.n++
	out := filepath.Join(s.dir, fmt.Sprintf("%d.out", s.n))
	errOut := filepath.Join(s.dir, fmt.Sprintf("%d.err", s.n))
	script := fmt.Sprintf("{\n%s\n} >'%s' 2>'%s' </dev/null\nprintf 'status %%d\\n' \"$?\"\n", text, out, errOut)
	if _, err := s.stdin.WriteString(script); err != nil {
		return result{}, fmt.Errorf("bash has gone: %w; its stderr: %s", err, s.stderr)
	}
	var res result
	select {
	case line, ok := <-s.status:
		if _, err := fmt.Sscanf(line, "status %d", &res.code); !ok || err != nil {
			return result{}, fmt.Errorf("bash said %q, not an exit status; its stderr: %s", line, s.stderr)
		}
	case <-time.After(commandTimeout):
		return result{}, fmt.Errorf("the command ran for more than %s", commandTimeout)
	}
	stdout, _ := os.ReadFile(out)
	stderr, _ := os.ReadFile(errOut)
	res.stdout, res.stderr = string(stdout), string(stderr)
	return res, nil
}

// stop ends bash (it reads to the end of its input) and kills its process
// group: what the docs started in the background.
func (s *shell) stop() {
	_ = s.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// checkMetricsDocumented requires every ferry_ metric that env's /metrics
// exports (after the docs' commands made series of most of them) to be
// named in docs/metrics.md.
func checkMetricsDocumented(t *testing.T, env *ferrytest.Env) {
	r := env.Do("GET", "/metrics", nil)
	require.Equal(t, 200, r.Status)
	doc, err := os.ReadFile("metrics.md")
	require.NoError(t, err)
	var missing []string
	for _, l := range strings.Split(string(r.Body), "\n") {
		name, ok := strings.CutPrefix(l, "# HELP ferry_")
		if !ok {
			continue
		}
		name = "ferry_" + strings.Fields(name)[0]
		if !strings.Contains(string(doc), "`"+name+"`") {
			missing = append(missing, name)
		}
	}
	require.Empty(t, missing, "metrics /metrics exports that docs/metrics.md does not name")
}
