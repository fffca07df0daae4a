package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// Every relative link of README.md and docs/*.md names a file that
// exists, and an anchor a heading of that file makes.
func TestLinks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	files, err := docFiles(root)
	require.NoError(t, err)
	var broken []string
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		for _, link := range links(string(src)) {
			if err := checkLink(root, f, link); err != nil {
				broken = append(broken, fmt.Sprintf("%s: %s: %v", f, link, err))
			}
		}
	}
	require.Empty(t, broken)
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// links returns the link targets of a Markdown file, outside its code
// blocks.
func links(src string) []string {
	var out []string
	for _, l := range proseLines(src) {
		for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// proseLines returns the lines of src outside its fenced code blocks.
func proseLines(src string) []string {
	var out []string
	fence := ""
	for _, l := range strings.Split(src, "\n") {
		m := fenceRE.FindStringSubmatch(l)
		switch {
		case fence == "" && m != nil:
			fence = m[2]
		case fence != "" && strings.Trim(strings.TrimSpace(l), fence[:1]) == "" && len(strings.TrimSpace(l)) >= len(fence):
			fence = ""
		case fence == "":
			out = append(out, l)
		}
	}
	return out
}

// checkLink checks a link of file (from the root) to target.
func checkLink(root, file, target string) error {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return nil
	}
	path, anchor, _ := strings.Cut(target, "#")
	if path == "" {
		path = file
	} else {
		path = filepath.Join(filepath.Dir(file), path)
	}
	src, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		if _, dirErr := os.Stat(filepath.Join(root, path)); dirErr == nil && anchor == "" {
			return nil // a directory
		}
		return err
	}
	if anchor == "" || !strings.HasSuffix(path, ".md") {
		return nil
	}
	for _, a := range anchors(string(src)) {
		if a == anchor {
			return nil
		}
	}
	return fmt.Errorf("%s has no heading that makes #%s", path, anchor)
}

// anchors returns the anchors GitHub makes of a file's headings: lower
// case, punctuation dropped, spaces made hyphens, a repeated one numbered.
func anchors(src string) []string {
	seen := map[string]int{}
	var out []string
	for _, l := range proseLines(src) {
		text, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " ")
		if !ok || !strings.HasPrefix(l, "#") {
			continue
		}
		slug := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, strings.TrimSpace(text))
		if n := seen[slug]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", slug, n))
		} else {
			out = append(out, slug)
		}
		seen[slug]++
	}
	return out
}
