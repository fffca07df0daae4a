package docs_test

import (
	"fmt"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// The answers the docs show match outputs of that shape, and only those.
func TestMatchAnswer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		answer, output string
		ok             bool
	}{
		{`{"id":"1","duplicate":false}`, `{"id":"1","duplicate":false,"extra":3}`, true},
		{`{"id":"1","duplicate":false}`, `{"id":"2","duplicate":false}`, false},
		{`{"id":"1","duplicate":false}`, `{"id":"1"}`, false},
		{`{"messages":[{"id":"1",…},…]}`, `{"messages":[{"id":"1","body":{}},{"id":"2"}]}`, true},
		{`{"messages":[{"id":"1",…},…]}`, `{"messages":[]}`, false},
		{`{"messages":[{"id":"1"}]}`, `{"messages":[{"id":"1"},{"id":"2"}]}`, false},
		{`{"messages":[…]}`, `{"messages":[]}`, true},
		{`{"messages":[…]}`, `{"messages":{}}`, false},
		{`{…, "receipt":"…", "receive_count":1}`, `{"receipt":"abc","receive_count":1,"id":"9"}`, true},
		{`{"receipt":"…"}`, `{"receipt":null}`, true},
		{`{"key":"ferry_sk_…"}`, `{"key":"ferry_sk_abc"}`, true},
		{`{"key":"ferry_sk_…"}`, `{"key":"fk_abc"}`, false},
		{`{"offset":0,"lag":1.0}`, `{"offset":0,"lag":1}`, true},
		{`{"offset":0}`, `{"offset":"0"}`, false},
		{`{"results":[{"status":"ok"}]}     ("stale" if the lease had expired)`, `{"results":[{"status":"ok"}]}`, true},
		{`{"filter":null}`, `{"filter":null}`, true},
		{`{"filter":null}`, `{"filter":{}}`, false},
		{`{"a":"x…z"}`, `{"a":"x[]y.*z"}`, true},
		{`{"a":1}`, `not json`, false},
		{`schema version … (latest …)`, "schema version 9 (latest 9)\n", true},
		{`schema version … (latest …)`, "schema version 9\n", false},
	} {
		err := matchAnswer(c.answer, c.output)
		if c.ok {
			require.NoError(t, err, "%s ~ %s", c.answer, c.output)
		} else {
			require.Error(t, err, "%s ~ %s", c.answer, c.output)
		}
	}
	require.Equal(t, 403, problemStatus(`{"status":403,"code":"forbidden",…}`))
	require.Equal(t, 0, problemStatus(`{"status":"ok"}`))
	require.Equal(t, 0, problemStatus(`{"events":[…]}`))
}

// A shell block is cut into the commands bash reads, each with the
// answer shown after it; a console block's output lines are its answer.
func TestSplitCommands(t *testing.T) {
	t.Parallel()
	b := block{file: "x.md", line: 10, lang: "sh", text: `# prose
f() { echo "$@"; }
f -d '{"a": [
  1, 2]}' \
  --more   # a remark
# → {"a":…}

echo "# → not an answer" | cat
# → # → not an answer
`}
	cmds, err := splitCommands(b)
	require.NoError(t, err)
	require.Equal(t, []command{
		{line: 12, text: "f() { echo \"$@\"; }\n"},
		{line: 13, text: "f -d '{\"a\": [\n  1, 2]}' \\\n  --more   # a remark\n", expect: `{"a":…}`},
		{line: 18, text: "echo \"# → not an answer\" | cat\n", expect: "# → not an answer"},
	}, cmds)

	b = block{file: "x.md", line: 1, lang: "console", text: "$ echo a\na\n$ echo b \\\n  c\nb c\n"}
	cmds, err = splitCommands(b)
	require.NoError(t, err)
	require.Equal(t, []command{{line: 2, text: "echo a\n", expect: "a"}, {line: 4, text: "echo b \\\n  c\n", expect: "b c"}}, cmds)

	_, err = splitCommands(block{file: "x.md", line: 1, lang: "sh", text: "echo 'never closed\n"})
	require.ErrorContains(t, err, "x.md:2: the block ends inside a command")
	_, err = splitCommands(block{file: "x.md", line: 1, lang: "sh", text: "# → {}\n"})
	require.ErrorContains(t, err, "an answer before any command")
}

// Blocks are read with their language and not-run marks; a block without
// a language, an unknown one, a mark without a reason or a block, and a
// listing marked not-run are refused.
func TestParseBlocks(t *testing.T) {
	t.Parallel()
	src := "# T\n\n<!-- not run: starts a server -->\n\n```sh\nmake dev\n```\n\n- item:\n\n  ```go\n  func f() {}\n  ```\n"
	blocks, err := parseBlocks("x.md", src)
	require.NoError(t, err)
	require.Equal(t, []block{
		{file: "x.md", line: 5, lang: "sh", text: "make dev\n", marked: true, reason: "starts a server"},
		{file: "x.md", line: 11, lang: "go", text: "func f() {}\n"},
	}, blocks)
	for _, b := range blocks {
		require.NoError(t, checkBlock(b))
	}

	_, err = parseBlocks("x.md", "<!-- not run: why -->\ntext\n")
	require.ErrorContains(t, err, "x.md:1: a not-run comment is not followed by a code block")
	_, err = parseBlocks("x.md", "```sh\necho\n")
	require.ErrorContains(t, err, "x.md:1: the code block is never closed")
	require.ErrorContains(t, checkBlock(block{file: "x.md", line: 3}), "x.md:3: the code block names no language")
	require.ErrorContains(t, checkBlock(block{file: "x.md", line: 3, lang: "zsh"}), `unknown language "zsh"`)
	require.ErrorContains(t, checkBlock(block{file: "x.md", line: 3, lang: "go", marked: true, reason: "x"}), "needs no not-run comment")
	require.ErrorContains(t, checkBlock(block{file: "x.md", line: 3, lang: "sh", marked: true}), "gives no reason")
	require.NoError(t, checkBlock(block{file: "x.md", line: 3, lang: "python", text: "print(1)\n"}), "python blocks run")
	require.NoError(t, checkBlock(block{file: "x.md", line: 3, lang: "javascript"}), "a javascript block is run")
	require.NoError(t, checkBlock(block{file: "x.md", line: 3, lang: "javascript", marked: true, reason: "r"}))
	require.ErrorContains(t, checkBlock(block{file: "x.md", line: 3, lang: "javascript", text: "fetch('https://sqs.us-east-1.amazonaws.com/')"}),
		"names 127.0.0.1 or a .invalid host", "a javascript block is held to the hosts of blocks the test runs")
	push := `ferry-curl -X PUT "$FERRY_URL/v1/queues/q" -d '{"push": {"url": "%s"}}'`
	for _, ok := range []string{"http://127.0.0.1:8000/", "https://hooks.example.invalid/x"} {
		require.NoError(t, checkBlock(block{file: "x.md", line: 3, lang: "sh", text: fmt.Sprintf(push, ok)}))
	}
	for _, bad := range []string{"https://hooks.example.com/x", "http://localhost:8000/", "http://10.0.0.1/"} {
		require.ErrorContains(t, checkBlock(block{file: "x.md", line: 3, lang: "sh", text: fmt.Sprintf(push, bad)}), "names 127.0.0.1 or a .invalid host")
		require.NoError(t, checkBlock(block{file: "x.md", line: 3, lang: "sh", text: fmt.Sprintf(push, bad), marked: true, reason: "r"}))
	}
}

// A python or javascript block is one command, python3 or node reading
// it from a heredoc in the file's bash; its `# →` (python) or `// →`
// (javascript) lines are the answer.
func TestProgramCommand(t *testing.T) {
	t.Parallel()
	c := programCommand(block{file: "x.md", line: 4, lang: "python", text: "print('a')\n# → a\nprint('b')  # not an answer\n# → b\n"})
	require.Equal(t, command{line: 5, text: "python3 - <<'FERRY_PROGRAM_BLOCK'\nprint('a')\n# → a\nprint('b')  # not an answer\n# → b\nFERRY_PROGRAM_BLOCK\n",
		expect: "a\nb"}, c)
	out, err := exec.Command("bash", "-c", c.text).Output()
	require.NoError(t, err)
	require.NoError(t, matchAnswer(c.expect, string(out)))

	js := programCommand(block{file: "x.md", line: 4, lang: "javascript", text: "console.log('a');\n// → a\n"})
	require.Equal(t, command{line: 5, text: "(cd docs/testdata && node --input-type=module) <<'FERRY_PROGRAM_BLOCK'\n" +
		"console.log('a');\n// → a\nFERRY_PROGRAM_BLOCK\n", expect: "a"}, js)
	require.Equal(t, "", programCommand(block{file: "x.md", line: 4, lang: "python", text: "// → a\n"}).expect,
		"`// →` is no answer in a python block")
}
