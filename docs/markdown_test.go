package docs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// block is one fenced code block of a Markdown file.
type block struct {
	file   string // the file's path from the repository root
	line   int    // the opening fence's line, from 1
	lang   string // the first word of the info string ("" when none)
	text   string // the content, the fence's indentation taken off
	marked bool   // a `<!-- not run: reason -->` line comes just before it
	reason string // that reason
}

// The languages of the blocks: a shell block is run by bash, a sql block
// by psql, a python block by python3 and a javascript block by node as an
// ES module (both in the file's bash, so they see what the shell blocks
// before them exported; node's imports resolve in docs/testdata, whose
// pinned packages `npm ci --prefix docs/testdata` installs); a listing
// (source code, a document, a log) is never run.
var (
	shellLangs   = []string{"sh", "bash", "shell", "console"}
	listingLangs = []string{"go", "json", "yaml", "text", "http"}
)

// runs reports whether the docs test runs blocks of the language.
func runs(lang string) bool {
	return slices.Contains(shellLangs, lang) || lang == "sql" || lang == "python" || lang == "javascript"
}

var (
	fenceRE  = regexp.MustCompile("^( *)(```+|~~~+)[ \t]*([^ \t`]*)")
	notRunRE = regexp.MustCompile(`^<!--\s*not run:\s*(.*?)\s*-->$`)
)

// where names a line of a file, for failure messages.
func where(file string, line int) string { return fmt.Sprintf("%s:%d", file, line) }

// parseBlocks returns the fenced code blocks of src, the Markdown file
// file. A not-run comment must be followed by a fence.
func parseBlocks(file, src string) ([]block, error) {
	lines := strings.Split(src, "\n")
	var out []block
	marker := 0 // the line of a not-run comment waiting for its block
	var reason string
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		m := fenceRE.FindStringSubmatch(lines[i])
		switch {
		case trimmed == "":
			continue
		case m == nil && marker != 0:
			return nil, fmt.Errorf("%s: a not-run comment is not followed by a code block", where(file, marker))
		case m == nil:
			if n := notRunRE.FindStringSubmatch(trimmed); n != nil {
				marker, reason = i+1, n[1]
			}
			continue
		}
		b := block{file: file, line: i + 1, lang: m[3], marked: marker != 0, reason: reason}
		marker, reason = 0, ""
		end, err := closeFence(lines, i, m[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where(file, b.line), err)
		}
		b.text = dedent(lines[i+1:end], len(m[1]))
		out = append(out, b)
		i = end
	}
	return out, nil
}

// closeFence returns the line of the fence that closes the one opened at
// lines[open].
func closeFence(lines []string, open int, fence string) (int, error) {
	for i := open + 1; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		if len(t) >= len(fence) && strings.Trim(t, fence[:1]) == "" {
			return i, nil
		}
	}
	return 0, fmt.Errorf("the code block is never closed")
}

// dedent joins lines, each without up to n leading spaces (a block in a
// list item is indented as the item is).
func dedent(lines []string, n int) string {
	var b strings.Builder
	for _, l := range lines {
		trim := min(n, len(l)-len(strings.TrimLeft(l, " ")))
		b.WriteString(l[trim:])
		b.WriteByte('\n')
	}
	return b.String()
}

// checkBlock says what is wrong with b's language or marking: every
// block names its language; one the test runs is run unless marked, with
// a reason; a listing is never marked (it is never run anyway). A block
// the test runs reaches no host but 127.0.0.1 and .invalid ones.
func checkBlock(b block) error {
	run := runs(b.lang)
	switch {
	case b.lang == "":
		return fmt.Errorf("%s: the code block names no language (sh, sql, python, javascript, or a listing: %s)", where(b.file, b.line), strings.Join(listingLangs, ", "))
	case !run && !slices.Contains(listingLangs, b.lang):
		return fmt.Errorf("%s: unknown language %q: the docs test runs %s, sql, python and javascript blocks, and knows the listings %s",
			where(b.file, b.line), b.lang, strings.Join(shellLangs, ", "), strings.Join(listingLangs, ", "))
	case !run && b.marked:
		return fmt.Errorf("%s: a %s block is a listing, never run: it needs no not-run comment", where(b.file, b.line), b.lang)
	case b.marked && b.reason == "":
		return fmt.Errorf("%s: the not-run comment gives no reason", where(b.file, b.line))
	}
	if run && !b.marked {
		for _, m := range urlRE.FindAllStringSubmatch(b.text, -1) {
			if host := m[1]; host != "127.0.0.1" && !strings.HasSuffix(host, ".invalid") {
				return fmt.Errorf("%s: %s: a URL in a block the test runs names 127.0.0.1 or a .invalid host", where(b.file, b.line), m[0])
			}
		}
	}
	return nil
}

// urlRE finds http URLs and their hosts.
var urlRE = regexp.MustCompile(`https?://([A-Za-z0-9.-]+)`)

// command is one command of a shell block, with the answer the docs show
// for it.
type command struct {
	line   int    // its first line in the file
	text   string // the command, as bash reads it (one or more lines)
	expect string // the `# → ...` lines after it, or a console block's output lines, without the markers
}

// splitCommands cuts a shell block into its commands: a command ends
// with the first line at which bash finds it complete (quotes closed, no
// trailing backslash, pipe or open brace). Comment lines between commands
// are prose, except those that start with `# →`: the expected answer of
// the command before. In a console block a command starts with `$ ` and
// the lines after it are its output.
func splitCommands(b block) ([]command, error) {
	var cmds []command
	var pending strings.Builder
	start := 0
	lines := strings.Split(strings.TrimSuffix(b.text, "\n"), "\n")
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if pending.Len() == 0 {
			answer, isAnswer := answerLine(b.lang, trimmed)
			switch {
			case isAnswer && len(cmds) == 0:
				return nil, fmt.Errorf("%s: an answer before any command", where(b.file, b.line+1+i))
			case isAnswer:
				last := &cmds[len(cmds)-1]
				last.expect = strings.TrimPrefix(last.expect+"\n"+answer, "\n")
				continue
			case trimmed == "" || strings.HasPrefix(trimmed, "#"):
				continue
			}
			l = strings.TrimPrefix(l, "$ ")
			start = b.line + 1 + i
		}
		pending.WriteString(l + "\n")
		if complete(pending.String()) {
			cmds = append(cmds, command{line: start, text: pending.String()})
			pending.Reset()
		}
	}
	if pending.Len() > 0 {
		out, _ := exec.Command("bash", "-n", "-c", pending.String()).CombinedOutput()
		return nil, fmt.Errorf("%s: the block ends inside a command: %s", where(b.file, start), out)
	}
	return cmds, nil
}

// answerLine reports whether a line between commands shows an answer,
// and the answer: `# → answer` in any shell or python block, `// → answer`
// in a javascript block, and in a console block every line that is not a
// `$ ` command.
func answerLine(lang, trimmed string) (string, bool) {
	if rest, ok := strings.CutPrefix(trimmed, "# →"); ok {
		return strings.TrimSpace(rest), true
	}
	if rest, ok := strings.CutPrefix(trimmed, "// →"); ok && lang == "javascript" {
		return strings.TrimSpace(rest), true
	}
	if lang == "console" && trimmed != "" && !strings.HasPrefix(trimmed, "$ ") && !strings.HasPrefix(trimmed, "#") {
		return trimmed, true
	}
	return "", false
}

// complete reports whether bash reads text as whole commands.
func complete(text string) bool {
	if strings.HasSuffix(strings.TrimRight(text, " \t\n"), `\`) {
		return false
	}
	return exec.Command("bash", "-n", "-c", text).Run() == nil
}

// docFiles returns the Markdown files whose commands the docs test runs,
// from the repository root: README.md first, then docs/*.md by name.
func docFiles(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	out := []string{"README.md"}
	for _, f := range files {
		out = append(out, filepath.Join("docs", filepath.Base(f)))
	}
	slices.Sort(out[1:])
	return out, nil
}

// readBlocks parses the blocks of every doc file and checks each one.
func readBlocks(root string) (map[string][]block, []error) {
	files, err := docFiles(root)
	if err != nil {
		return nil, []error{err}
	}
	all := map[string][]block{}
	var errs []error
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		blocks, err := parseBlocks(f, string(src))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, b := range blocks {
			if err := checkBlock(b); err != nil {
				errs = append(errs, err)
			}
		}
		all[f] = blocks
	}
	return all, errs
}
