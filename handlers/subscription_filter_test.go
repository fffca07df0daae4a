package handlers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/ferrytest"
)

// Type patterns a client could make expensive for every publish and every
// backfill are refused: the attack of 100 patterns of 255 bytes
// alternating # and a word (each a 400 that names the pattern and the
// limit), more than 8 # in a pattern, patterns over 8192 bytes together,
// a filter over 64 KiB. Nothing is written.
func TestSubscriptionFilterComplexityRefused(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "t", map[string]any{"partitions": 1}, http.StatusCreated)
	attack := strings.Repeat("#.a.", 63) + "#.a"
	for _, c := range []struct {
		name   string
		filter map[string]any
		field  string
		detail string
	}{
		{"the attack", map[string]any{"types": repeat(attack, 100)}, "filter.types[0]", "at most 8 # wildcards"},
		{"9 #", map[string]any{"types": []string{"a.*", strings.Repeat("#.a.", 9) + "b"}}, "filter.types[1]", "at most 8 # wildcards"},
		{"types over 8192 bytes", map[string]any{"types": repeat(strings.Repeat("x", 200), 41)}, "filter.types", "at most 8192 bytes together"},
		{"filter over 64 KiB", map[string]any{"attributes": map[string]any{"k": repeat(strings.Repeat("v", 4000), 20)}}, "filter", "at most 65536 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := forTest(env, t)
			for _, path := range []string{spath("t", "new"), spath("t", "new2")} {
				r := env.Do("PUT", path, map[string]any{"filter": c.filter, "start": "earliest"})
				p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
				require.Contains(t, p["detail"], c.field+": ")
				require.Contains(t, p["detail"], c.detail)
			}
			requireProblem(t, env.Do("GET", spath("t", "new"), nil), http.StatusNotFound, "not_found")
		})
	}
	require.Empty(t, listSubs(t, env, "t"))
}

// worstPatterns is the costliest type filter the limits allow: 100
// patterns of 81 bytes (8192 together), each with 8 #, matching types of
// 8 "a", a digit and 24 "a".
func worstPatterns() []string {
	out := make([]string, 100)
	for i := range out {
		out[i] = strings.Repeat("#.a.", 8) + fmt.Sprint(i%10) + strings.Repeat(".a", 24)
	}
	return out
}

// The costliest filter allowed bounds the work of a backfill, a seek and
// the publishes: over 10,000 events whose types keep every pattern alive
// to their last word, each answers within a bound far above what it
// takes (a safety net, not a measurement; the attack's patterns took
// about 70 s to backfill), with exactly the events that match.
func TestSubscriptionWorstFilterIsBounded(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "log", map[string]any{"partitions": 4}, http.StatusCreated)
	matching := strings.Repeat("a.", 8) + "3" + strings.Repeat(".a", 24)
	costly := strings.Repeat("a.", 120) + "3." + strings.Repeat("a.", 5) + "b" // 255 bytes, 128 words
	batch := func(round int) []map[string]any {
		evs := make([]map[string]any, 1000)
		for i := range evs {
			typ := costly
			if i%4 == 0 {
				typ = matching
			}
			evs[i] = evt(typ, "id", fmt.Sprintf("e%d-%d", round, i), "key", fmt.Sprintf("k%d", i%50))
		}
		return evs
	}
	for round := range 10 {
		publishEvents(t, env, "log", batch(round)...)
	}
	const bound = 30 * time.Second // the attack took ~70 s; -race on a loaded 2-core machine took up to 16 s
	filter := map[string]any{"types": worstPatterns()}
	for _, ordered := range []bool{false, true} {
		name := fmt.Sprintf("ordered-%v", ordered)
		began := time.Now()
		s := putSub(t, env, "log", name, map[string]any{"filter": filter, "ordered": ordered, "start": "earliest"}, http.StatusCreated)
		require.Less(t, time.Since(began), bound, "the backfill of %s", name)
		require.EqualValues(t, 2500, s.Stats.Available, "%s: the matching events, each once", name)

		began = time.Now()
		r := env.Do("POST", spath("log", name, "/seek"), map[string]any{"to": "earliest"})
		require.Equal(t, http.StatusNoContent, r.Status, "seek: %s", r.Body)
		require.Less(t, time.Since(began), bound, "the seek of %s", name)
		require.EqualValues(t, 2500, subCounts(t, env, "log", name).Available)
	}

	// Publishing to the subscriptions matches every event against the
	// patterns.
	began := time.Now()
	publishEvents(t, env, "log", batch(10)...)
	require.Less(t, time.Since(began), bound, "a publish of 1,000 costly events")
	require.EqualValues(t, 2750, subCounts(t, env, "log", "ordered-false").Available)
}
