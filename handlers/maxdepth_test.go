package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/ferrytest"
)

// TestMaxDepthDedupAndImpossibleBatch (API.md § Work queues): at
// max_depth, a resent dedup_id is answered 201 with duplicate: true and
// the first id (duplicates take no room); a batch with more new messages
// than max_depth can never fit and is a 400, not a 429; a batch that fits
// an emptier queue is a 429.
func TestMaxDepthDedupAndImpossibleBatch(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "md", map[string]any{"max_depth": 2})
	first := send(t, env, "md", msg(1, "dedup_id", "a"), msg(2, "dedup_id", "b"))

	again := send(t, env, "md", msg(1, "dedup_id", "a"))
	require.Equal(t, []sentJSON{{ID: first[0].ID, Duplicate: true}}, again)

	before := counts(t, env, "md")
	r := env.Do("POST", qpath("md", "/messages"), map[string]any{"messages": []any{msg(3), msg(4), msg(5)}})
	p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
	require.Contains(t, p["detail"], "max_depth")
	require.Empty(t, r.Header.Get("Retry-After"), "retrying cannot help")

	r = env.Do("POST", qpath("md", "/messages"), map[string]any{"messages": []any{msg(3, "dedup_id", "a"), msg(4)}})
	requireProblem(t, r, http.StatusTooManyRequests, "queue_full")
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Equal(t, before, counts(t, env, "md"), "refused batches write nothing")
}
