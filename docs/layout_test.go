package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The house rule of the tree's layout: every Go source file a.go has a
// test file of its name beside it, a_test.go or a_internal_test.go (tests
// that need the package's unexported names), so that the tests of a
// concept are found where the concept is. A file is exempt when
// layoutExempt says why.

// platformSuffixes mark platform shims (a_linux.go, a_other.go): the same
// function for another platform, tested through the file it stands in for.
var platformSuffixes = []string{"_linux", "_darwin", "_windows", "_unix", "_other"}

// layoutExempt returns why the source file at rel (slash-separated, from
// the repository's root) needs no test file of its own, or "" when it does.
func layoutExempt(rel string, f *ast.File) string {
	base := strings.TrimSuffix(path.Base(rel), ".go")
	switch {
	case base == "doc":
		return "a package's documentation"
	case slices.ContainsFunc(platformSuffixes, func(s string) bool { return strings.HasSuffix(base, s) }):
		return "a platform shim"
	case strings.HasPrefix(rel, "examples/") && f.Name.Name == "main":
		return "an example program (examples_test.go and the docs test run them)"
	case strings.HasPrefix(rel, "internal/testkit/"):
		return "test tooling, exercised by every test that uses it"
	case strings.HasPrefix(rel, "cmd/ferry-bench/"):
		return "the benchmark harness: its scenarios run under make bench, not go test"
	case !declaresFunctions(f):
		return "declarations only (types, constants), nothing that runs"
	}
	return ""
}

func declaresFunctions(f *ast.File) bool {
	return slices.ContainsFunc(f.Decls, func(d ast.Decl) bool { _, ok := d.(*ast.FuncDecl); return ok })
}

// sourcesLackingTests walks the repository from root and returns the
// source files (slash-separated paths) that have no test file of their
// name and no exemption.
func sourcesLackingTests(t *testing.T, root string) []string {
	t.Helper()
	var lacking []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if layoutExempt(filepath.ToSlash(rel), f) != "" || hasTestFile(p) {
			return nil
		}
		lacking = append(lacking, filepath.ToSlash(rel))
		return nil
	})
	require.NoError(t, err)
	return lacking
}

// hasTestFile reports whether a_test.go or a_internal_test.go stands
// beside the source file a.go at p.
func hasTestFile(p string) bool {
	stem := strings.TrimSuffix(p, ".go")
	for _, name := range []string{stem + "_test.go", stem + "_internal_test.go"} {
		if _, err := os.Stat(name); err == nil {
			return true
		}
	}
	return false
}

// TestEverySourceHasItsTestFile holds the rule over the whole tree: no
// source file lacks its test file but the exempt ones.
func TestEverySourceHasItsTestFile(t *testing.T) {
	t.Parallel()
	lacking := sourcesLackingTests(t, "..")
	require.Empty(t, lacking, "source files without a test file of their name (a_test.go or a_internal_test.go); write one, or move the tests of that concept there")
}

// TestLayoutExemptions: the exemption rule says yes and no where it
// should, so a rule too broad cannot hide a source file.
func TestLayoutExemptions(t *testing.T) {
	t.Parallel()
	parse := func(src string) *ast.File {
		f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
		require.NoError(t, err)
		return f
	}
	withFunc := parse("package store\nfunc F() {}\n")
	typesOnly := parse("package handlers\ntype T struct{}\nconst C = 1\n")
	mainFunc := parse("package main\nfunc main() {}\n")
	for rel, f := range map[string]*ast.File{
		"store/doc.go": withFunc, "internal/server/dial_other.go": withFunc, "internal/pgcluster/bouncer_linux.go": withFunc,
		"examples/order-created/main.go": mainFunc, "internal/testkit/pgtest/pgtest.go": withFunc,
		"cmd/ferry-bench/push.go": mainFunc, "handlers/handler.go": typesOnly,
	} {
		require.NotEmpty(t, layoutExempt(rel, f), rel)
	}
	for rel, f := range map[string]*ast.File{
		"store/message_send.go": withFunc, "cmd/ferry/dev.go": mainFunc, "store/documents.go": withFunc,
		"examples/order-created/helpers.go": withFunc, "internal/server/linux_dial.go": withFunc,
	} {
		require.Empty(t, layoutExempt(rel, f), rel)
	}
}
