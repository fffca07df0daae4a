package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// regexpOf is the meaning of type patterns as a regular expression over
// "." + type (how Ferry matched them before typeMatcher): each word w is
// `\.w`, "*" is `\.[^.]*` and a run of "#" is `(?:\.[^.]*)*`. The tests
// hold typeMatcher to it.
func regexpOf(patterns []string) *regexp.Regexp {
	res := make([]string, len(patterns))
	for i, p := range patterns {
		var b strings.Builder
		b.WriteString(`^`)
		prevHash := false
		for _, w := range strings.Split(p, ".") {
			switch w {
			case "*":
				b.WriteString(`\.[^.]*`)
			case "#":
				if !prevHash {
					b.WriteString(`(?:\.[^.]*)*`)
				}
			default:
				b.WriteString(`\.` + regexp.QuoteMeta(w))
			}
			prevHash = w == "#"
		}
		b.WriteString(`$`)
		res[i] = b.String()
	}
	return regexp.MustCompile(`(?:` + strings.Join(res, "|") + `)`)
}

// typeMatcher selects exactly the types the regular expression of the
// same patterns does, on random patterns and types over a few words (the
// empty word included), with patterns long enough to span several
// bitset words.
func TestTypeMatcherAgreesWithRegexp(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"a", "b", "", "*", "#", "#"}
	typeWords := []string{"a", "b", "", "c"}
	join := func(from []string, n int) string {
		ws := make([]string, n)
		for i := range ws {
			ws[i] = from[rng.IntN(len(from))]
		}
		return strings.Join(ws, ".")
	}
	for range 3000 {
		patterns := make([]string, 1+rng.IntN(4))
		for i := range patterns {
			patterns[i] = join(words, 1+rng.IntN(40))
		}
		m, re := newTypeMatcher(patterns), regexpOf(patterns)
		for range 20 {
			typ := join(typeWords, 1+rng.IntN(12))
			require.Equal(t, re.MatchString("."+typ), m.match(typ), "patterns %q, type %q", patterns, typ)
		}
	}
}

// The type patterns of the attack (100 patterns of 255 bytes alternating
// # and a word: 63 # each) are refused, with a message that says why, as
// are a pattern over the # limit and patterns over the total limit;
// patterns at the limits are taken.
func TestParseFilterBoundsTypeComplexity(t *testing.T) {
	t.Parallel()
	attack := strings.Repeat("#.a.", 63) + "#.a"
	require.Len(t, attack, 255)
	for _, c := range []struct {
		types []string
		field string
		msg   string
	}{
		{[]string{attack}, "filter.types[0]", "at most 8 # wildcards"},
		{repeat(attack, maxFilterTypes), "filter.types[0]", "at most 8 # wildcards"},
		{[]string{"ok", strings.Repeat("#.a.", 9) + "z"}, "filter.types[1]", "not 9"},
		{repeat(strings.Repeat("x", 200), 41), "filter.types", "at most 8192 bytes together"},
	} {
		raw, err := json.Marshal(map[string]any{"types": c.types})
		require.NoError(t, err)
		_, err = ParseFilter(raw)
		var verr *ValidationError
		require.True(t, errors.As(err, &verr), "types %.80q: %v", c.types, err)
		require.Equal(t, c.field, verr.Field)
		require.Contains(t, verr.Message, c.msg)
	}
	for _, types := range [][]string{
		{strings.Repeat("#.a.", 8) + "z"},                    // 8 #
		{strings.Repeat("#.#.a.", 8) + "z"},                  // runs count once
		{strings.TrimSuffix(strings.Repeat("#.", 128), ".")}, // one run
		worstTypePatterns(),
	} {
		raw, err := json.Marshal(map[string]any{"types": types})
		require.NoError(t, err)
		_, err = ParseFilter(raw)
		require.NoError(t, err, "types %.80q", types)
	}
}

// The whole filter is bounded too: attribute lists at their other limits
// could otherwise make one filter megabytes that every publish compares.
func TestParseFilterBoundsSize(t *testing.T) {
	t.Parallel()
	values := repeat(strings.Repeat("v", 4000), 20) // 80 kB
	raw, err := json.Marshal(map[string]any{"attributes": map[string]any{"k": values}})
	require.NoError(t, err)
	_, err = ParseFilter(raw)
	var verr *ValidationError
	require.True(t, errors.As(err, &verr), "%v", err)
	require.Equal(t, "filter", verr.Field)
	require.Contains(t, verr.Message, "at most 65536 bytes")
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// worstTypePatterns is the costliest type filter the limits allow for
// typeMatcher: the most patterns, each with the most "#" and as many
// words as the total allows, every word one the worst types hold.
func worstTypePatterns() []string {
	per := maxFilterTypesBytes / maxFilterTypes // 81 bytes
	out := make([]string, maxFilterTypes)
	for i := range out {
		p := strings.Repeat("#.a.", maxFilterHashes) + fmt.Sprintf("%d", i%10)
		for len(p)+2 <= per {
			p += ".a"
		}
		out[i] = p
	}
	return out
}

// worstTypes are types of the most words (128 in 255 bytes) that keep
// every pattern of worstTypePatterns alive to the end.
func worstTypes() []string {
	return []string{
		strings.TrimSuffix(strings.Repeat("a.", 128), "."),
		strings.Repeat("a.", 126) + "0",
		strings.Repeat("a.", 120) + "0." + strings.Repeat("a.", 5) + "b",
	}
}

// Publishing is never slowed by a filter: every publish matches each
// event against each subscription's patterns, so the costliest patterns
// the limits allow must match the costliest types quickly. (The regular
// expression of the same patterns takes Go's NFA tens of milliseconds a
// type; of the attack's patterns, about 100 ms.) The bound is loose, a
// safety net against a return to such a matcher, not a measurement; see
// BenchmarkTypeMatcherWorst for the figure.
func TestTypeMatcherWorstAllowedIsCheap(t *testing.T) {
	t.Parallel()
	f := mustParseFilter(t, mustJSON(t, map[string]any{"types": worstTypePatterns()}))
	types := worstTypes()
	began := time.Now()
	for i := range 3000 {
		f.matchType(types[i%len(types)])
	}
	// The regular expression took ~150 s for these 3,000; -race on a loaded
	// 2-core machine took up to 5.7 s.
	require.Less(t, time.Since(began), 20*time.Second, "3,000 matches of the costliest allowed filter")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// BenchmarkTypeMatcherWorst matches the costliest allowed type filter
// against the costliest types; BenchmarkTypeMatcherTypical a filter as
// people write them.
func BenchmarkTypeMatcherWorst(b *testing.B) {
	m := newTypeMatcher(worstTypePatterns())
	types := worstTypes()
	b.ResetTimer()
	for i := range b.N {
		m.match(types[i%len(types)])
	}
}

func BenchmarkTypeMatcherTypical(b *testing.B) {
	m := newTypeMatcher([]string{"order.*", "#.refunded", "invoice.#"})
	for range b.N {
		m.match("order.created")
	}
}
