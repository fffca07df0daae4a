package handlers_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// requireTooLarge requires r to be a 413 and the queues to be as before:
// the refused request wrote nothing.
func requireTooLarge(t testing.TB, env *ferrytest.Env, r ferrytest.Response, before []client.Queue) {
	t.Helper()
	requireProblem(t, r, http.StatusRequestEntityTooLarge, "payload_too_large")
	require.Equal(t, before, snapshot(t, env))
}

// stringBody is a JSON string whose compact encoding, quotes included, is
// exactly n bytes.
func stringBody(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("a", n-2) + `"`)
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	const limit = 1024
	env := ferrytest.Start(t, withLimits(limit, 0))
	putQueue(t, env, "lim", nil)

	// Exactly the limit is allowed, and comes back whole.
	sent := send(t, env, "lim", msg(stringBody(limit)))
	got := receive(t, env, "lim", nil)
	require.Equal(t, sent[0].ID, got[0].ID)
	require.Len(t, got[0].Body, limit)
	ack(t, env, "lim", receipts(got)...)

	// Whitespace outside strings does not count: the compact encoding does.
	spaced := `{ "k" :  "` + strings.Repeat("b", limit-8) + `" }` // compact: {"k":"…"} = limit
	require.Greater(t, len(spaced), limit)
	send(t, env, "lim", msg(json.RawMessage(spaced)))
	got = receive(t, env, "lim", nil)
	require.Len(t, got, 1)
	var compact bytes.Buffer
	require.NoError(t, json.Compact(&compact, got[0].Body))
	require.Equal(t, limit, compact.Len())
	ack(t, env, "lim", receipts(got)...)

	before := snapshot(t, env)
	for name, body := range map[string]json.RawMessage{
		"string one over":     stringBody(limit + 1),
		"object one over":     json.RawMessage(`{"k":"` + strings.Repeat("b", limit-7) + `"}`),
		"spaced object over":  json.RawMessage(`{ "k" : "` + strings.Repeat("b", limit-7) + `" }`),
		"array far over":      json.RawMessage(`[` + strings.Repeat(`1,`, limit) + `1]`),
		"escapes count as is": json.RawMessage(`"` + strings.Repeat(`\u0041`, limit/6+1) + `"`),
	} {
		t.Run(name, func(t *testing.T) {
			env := forTest(env, t)
			r := env.Do("POST", "/v1/queues/lim/messages", map[string]any{"messages": []any{msg(body)}})
			requireTooLarge(t, env, r, before)
		})
	}

	// One oversized message refuses the whole batch.
	r := env.Do("POST", "/v1/queues/lim/messages", map[string]any{"messages": []any{
		msg(1), msg(stringBody(limit)), msg(stringBody(limit + 1)), msg(2)}})
	requireTooLarge(t, env, r, before)
}

func TestBodyLimitDefault256KiB(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "big", nil)
	const limit = 256 << 10
	send(t, env, "big", msg(stringBody(limit)))
	require.EqualValues(t, 1, stats(t, env, "big").Available)
	r := env.Do("POST", "/v1/queues/big/messages", map[string]any{"messages": []any{msg(stringBody(limit + 1))}})
	requireProblem(t, r, http.StatusRequestEntityTooLarge, "payload_too_large")
	require.EqualValues(t, 1, stats(t, env, "big").Available)
	got := receive(t, env, "big", nil)
	require.Len(t, got[0].Body, limit)
}

func TestBatchLimit(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "batch", nil)
	batch := func(n int) map[string]any {
		ms := make([]any, n)
		for i := range ms {
			ms[i] = msg(i)
		}
		return map[string]any{"messages": ms}
	}
	r := env.Do("POST", "/v1/queues/batch/messages", batch(1001))
	requireProblem(t, r, http.StatusRequestEntityTooLarge, "payload_too_large")
	require.Equal(t, client.QueueStats{}, stats(t, env, "batch"))

	r = env.Do("POST", "/v1/queues/batch/messages", batch(1000))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var out struct {
		Messages []client.Sent `json:"messages"`
	}
	r.JSON(t, &out)
	require.Len(t, out.Messages, 1000)
	require.EqualValues(t, 1000, stats(t, env, "batch").Available)

	// Receipts: 1000 is fine (each reported), 1001 is refused.
	var rs []string
	for len(rs) < 1000 {
		rs = append(rs, receipts(receive(t, env, "batch", map[string]any{"max_messages": 100, "visibility_timeout_seconds": 600}))...)
	}
	requireProblem(t, env.Do("POST", "/v1/queues/batch/ack", map[string]any{"receipts": append(rs, rs[0])}),
		http.StatusRequestEntityTooLarge, "payload_too_large")
	require.EqualValues(t, 1000, stats(t, env, "batch").InFlight)
	require.Equal(t, repeat("ok", 1000), ack(t, env, "batch", rs...))
	require.Equal(t, client.QueueStats{}, stats(t, env, "batch"))
}

func TestRequestLimit(t *testing.T) {
	t.Parallel()
	const limit = 4096
	env := ferrytest.Start(t, withLimits(1024, limit))
	putQueue(t, env, "req", nil)

	// A request of exactly the limit is read; one byte more is refused.
	pad := func(n int) string { // valid JSON padded with trailing spaces to n bytes
		s := `{"messages":[{"body":"fits"}]}`
		return s + strings.Repeat(" ", n-len(s))
	}
	r := env.Do("POST", "/v1/queues/req/messages", pad(limit))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	require.EqualValues(t, 1, stats(t, env, "req").Available)

	before := snapshot(t, env)
	over := map[string]struct{ method, path, body string }{
		"send padded":      {"POST", "/v1/queues/req/messages", pad(limit + 1)},
		"send many bodies": {"POST", "/v1/queues/req/messages", `{"messages":[` + strings.TrimSuffix(strings.Repeat(`{"body":"`+strings.Repeat("y", 900)+`"},`, 6), ",") + `]}`},
		"put":              {"PUT", "/v1/queues/req", `{"max_receives": 3` + strings.Repeat(" ", limit) + `}`},
		"put new":          {"PUT", "/v1/queues/req2", `{` + strings.Repeat(" ", limit) + `}`},
		"receive":          {"POST", "/v1/queues/req/receive", `{` + strings.Repeat(" ", limit) + `}`},
		"ack":              {"POST", "/v1/queues/req/ack", `{"receipts":["` + strings.Repeat("A", limit) + `"]}`},
		"redrive":          {"POST", "/v1/queues/req/dead-letters/redrive", `{"ids":[` + strings.TrimSuffix(strings.Repeat(`"12345678",`, 500), ",") + `]}`},
	}
	for name, tc := range over {
		t.Run(name, func(t *testing.T) {
			env := forTest(env, t)
			require.Greater(t, len(tc.body), limit)
			r := env.Do(tc.method, tc.path, tc.body)
			requireTooLarge(t, env, r, before)
		})
	}
}

func TestRequestLimitDefault10MiB(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "huge", nil)
	// 40 bodies of 256 KiB: each within the body limit, 10 MiB + in all.
	ms := make([]any, 41)
	for i := range ms {
		ms[i] = msg(stringBody(256 << 10))
	}
	raw, err := json.Marshal(map[string]any{"messages": ms})
	require.NoError(t, err)
	require.Greater(t, len(raw), 10<<20)
	r := env.Do("POST", "/v1/queues/huge/messages", raw)
	requireProblem(t, r, http.StatusRequestEntityTooLarge, "payload_too_large")
	require.Equal(t, client.QueueStats{}, stats(t, env, "huge"))
}

func TestBackpressure(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	q := putQueue(t, env, "bp", map[string]any{"max_depth": 5})
	require.EqualValues(t, 5, q.MaxDepth)
	send(t, env, "bp", msg(1), msg(2), msg(3), msg(4))

	full := func(n int) {
		t.Helper()
		before := snapshot(t, env)
		ms := make([]any, n)
		for i := range ms {
			ms[i] = msg("x" + strconv.Itoa(i))
		}
		r := env.Do("POST", "/v1/queues/bp/messages", map[string]any{"messages": ms})
		requireProblem(t, r, http.StatusTooManyRequests, "queue_full")
		ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After must be whole seconds: %q", r.Header.Get("Retry-After"))
		require.GreaterOrEqual(t, ra, 1)
		require.Equal(t, before, snapshot(t, env), "a refused batch writes nothing")
	}

	// 4 of 5: a batch of 2 would exceed it, whole; a batch of 1 fits.
	full(2)
	require.EqualValues(t, 4, stats(t, env, "bp").Available)
	send(t, env, "bp", msg(5))
	full(1)

	// In-flight messages count toward the depth; acked ones do not.
	got := receive(t, env, "bp", map[string]any{"max_messages": 2})
	full(1)
	ack(t, env, "bp", got[0].Receipt)
	send(t, env, "bp", msg(6))
	full(1)

	// Delayed messages count too; dead letters do not.
	settle(t, env, "bp", "nack", map[string]any{"receipts": []string{got[1].Receipt}, "delay_seconds": 600})
	require.EqualValues(t, 1, stats(t, env, "bp").Delayed)
	full(1)
	dead := receive(t, env, "bp", nil)
	settle(t, env, "bp", "nack", map[string]any{"receipts": receipts(dead), "dead_letter": true})
	send(t, env, "bp", msg(7))
	full(1)

	// Raising max_depth lets sends in again; 0 means no limit.
	putQueue(t, env, "bp", map[string]any{"max_depth": 0})
	batch := make([]map[string]any, 20)
	for i := range batch {
		batch[i] = msg(i)
	}
	send(t, env, "bp", batch...)
}

// TestBackpressureConcurrentSends: max_depth holds under concurrent sends
// too (API.md: "sends that would exceed it get 429"; the spec: "the whole
// batch is refused"): of 40 concurrent single-message sends to a queue with
// room for 10, exactly 10 succeed. Three rounds, since a race may hide.
func TestBackpressureConcurrentSends(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "cbp", map[string]any{"max_depth": 10})
	for round := range 3 {
		const n = 40
		results := make([]asyncResult, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				results[i] = doAsync(env, "POST", "/v1/queues/cbp/messages", map[string]any{"messages": []any{msg(i)}})
			})
		}
		wg.Wait()
		created, full := 0, 0
		for _, r := range results {
			require.NoError(t, r.err)
			switch r.status {
			case http.StatusCreated:
				created++
			case http.StatusTooManyRequests:
				full++
			default:
				t.Fatalf("unexpected %d: %s", r.status, r.body)
			}
		}
		s := stats(t, env, "cbp")
		require.LessOrEqual(t, s.Available, int64(10), "round %d: depth %d exceeds max_depth 10 (%d of %d concurrent sends accepted)",
			round, s.Available, created, n)
		require.Equal(t, 10, created, "round %d: accepted sends", round)
		require.Equal(t, n-10, full)
		require.Equal(t, http.StatusNoContent, env.Do("DELETE", "/v1/queues/cbp/messages", nil).Status)
	}
}
