package docs_test

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
)

// docs/configuration.md's table of variables has a row for every
// variable server.Config reads, and no other; each row names the
// variable's default (its default tag, or — for none) and, where `ferry
// dev` has its own (the dev tag), that one too.
func TestConfigurationListsEveryVariable(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("configuration.md")
	require.NoError(t, err)
	rows := variableRows(string(src))

	fields := reflect.TypeFor[server.Config]()
	var want []string
	for i := range fields.NumField() {
		f := fields.Field(i)
		name := f.Tag.Get("envconfig")
		if name == "" {
			continue
		}
		want = append(want, name)
		cell, ok := rows[name]
		if !ok {
			continue // reported below
		}
		if def, ok := f.Tag.Lookup("default"); ok {
			require.Contains(t, cell, "`"+def+"`", "%s: the default", name)
		} else {
			require.True(t, strings.HasPrefix(cell, "—"), "%s has no default: its cell starts with —, not %q", name, cell)
		}
		if dev, ok := f.Tag.Lookup("dev"); ok {
			require.Contains(t, cell, "`"+dev+"` under `ferry dev`", "%s: the default under ferry dev", name)
		}
	}
	got := make([]string, 0, len(rows))
	for name := range rows {
		got = append(got, name)
	}
	slices.Sort(want)
	slices.Sort(got)
	require.Equal(t, want, got, "the variables of the table in docs/configuration.md")
}

// variableRows returns the default cell of each variable the table of
// variables (the one whose header is `| variable | default | meaning |`)
// names in its first column.
func variableRows(src string) map[string]string {
	rows := map[string]string{}
	name := regexp.MustCompile("`(FERRY_[A-Z_]+)`")
	in := false
	for _, l := range strings.Split(src, "\n") {
		switch {
		case strings.HasPrefix(l, "| variable | default | meaning |"):
			in = true
		case in && !strings.HasPrefix(l, "|"):
			return rows
		case in:
			cells := strings.Split(l, " | ")
			if len(cells) < 3 {
				continue
			}
			for _, m := range name.FindAllStringSubmatch(cells[0], -1) {
				rows[m[1]] = strings.TrimSpace(cells[1])
			}
		}
	}
	return rows
}
