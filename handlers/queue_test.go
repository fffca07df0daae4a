package handlers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

func TestQueueWalkthrough(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)

	r := env.Do("PUT", "/v1/queues/jobs", map[string]any{"max_receives": 2})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r = env.Do("PUT", "/v1/queues/jobs", map[string]any{"visibility_timeout_seconds": 60})
	require.Equal(t, http.StatusOK, r.Status)
	q := r.Map(t)
	require.EqualValues(t, 2, q["max_receives"], "PUT keeps omitted fields")
	require.EqualValues(t, 60, q["visibility_timeout_seconds"])

	r = env.Do("POST", "/v1/queues/jobs/messages", map[string]any{"messages": []any{
		map[string]any{"body": map[string]any{"n": 1}, "attributes": map[string]string{"type": "a"}},
	}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

	r = env.Do("POST", "/v1/queues/jobs/receive", map[string]any{"max_messages": 10})
	require.Equal(t, http.StatusOK, r.Status)
	var recv struct {
		Messages []struct {
			ID      string `json:"id"`
			Receipt string `json:"receipt"`
		} `json:"messages"`
	}
	r.JSON(t, &recv)
	require.Len(t, recv.Messages, 1)

	r = env.Do("POST", "/v1/queues/jobs/ack", map[string]any{"receipts": []string{recv.Messages[0].Receipt}})
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), `"status":"ok"`)
	r = env.Do("POST", "/v1/queues/jobs/ack", map[string]any{"receipts": []string{recv.Messages[0].Receipt}})
	require.Contains(t, string(r.Body), `"status":"stale"`)

	r = env.Do("GET", "/v1/queues/jobs", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.EqualValues(t, 0, r.Map(t)["stats"].(map[string]any)["available"])
}

func TestQueuePutGetListDelete(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	before := time.Now().Add(-time.Minute)

	// No queues yet: an empty list, not null.
	r0 := env.Do("GET", "/v1/queues", nil)
	require.Equal(t, http.StatusOK, r0.Status)
	require.JSONEq(t, `{"queues":[],"next":null}`, string(r0.Body))

	// Create with an empty object: every default.
	r := env.Do("PUT", "/v1/queues/alpha", map[string]any{})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	obj := r.Map(t)
	requireKeys(t, obj, queueKeys, "queue")
	requireKeys(t, obj["stats"].(map[string]any), statsKeys, "stats")
	var q client.Queue
	r.JSON(t, &q)
	require.Equal(t, client.Queue{
		Name: "alpha", DelaySeconds: 0, DedupWindowSeconds: 300, MaxDepth: 0,
		VisibilityTimeoutSeconds: 30, MaxReceives: 5, RetentionSeconds: 345600, RetryMinSeconds: 1, RetryMaxSeconds: 300,
		DeadLetterSources: []string{}, Tags: map[string]string{},
		CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt,
	}, q)
	require.True(t, q.CreatedAt.After(before), "created_at %v", q.CreatedAt)
	require.False(t, q.UpdatedAt.Before(q.CreatedAt))

	// Create without a body at all: the same as {}.
	r = env.Do("PUT", "/v1/queues/bravo", nil)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

	// Create with every field set.
	custom := map[string]any{
		"visibility_timeout_seconds": 45, "max_receives": 3, "retention_seconds": 3600, "delay_seconds": 2,
		"dedup_window_seconds": 60, "max_depth": 100, "retry_min_seconds": 2, "retry_max_seconds": 20,
	}
	r = env.Do("PUT", "/v1/queues/charlie", custom)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var c client.Queue
	r.JSON(t, &c)
	wantC := client.Queue{
		Name: "charlie", DelaySeconds: 2, DedupWindowSeconds: 60, MaxDepth: 100,
		VisibilityTimeoutSeconds: 45, MaxReceives: 3, RetentionSeconds: 3600, RetryMinSeconds: 2, RetryMaxSeconds: 20,
		DeadLetterSources: []string{}, Tags: map[string]string{},
		CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt,
	}
	require.Equal(t, wantC, c)

	// Update one field: 200, the others keep their (non-default) values.
	c2 := call[client.Queue](t, env, "PUT", "/v1/queues/charlie", map[string]any{"max_receives": 7}, nil, http.StatusOK)
	wantC.MaxReceives = 7
	wantC.UpdatedAt = c2.UpdatedAt
	require.Equal(t, wantC, c2)
	require.True(t, c2.CreatedAt.Equal(c.CreatedAt), "created_at must not change on update")
	require.False(t, c2.UpdatedAt.Before(c.UpdatedAt))

	// An empty update changes nothing and is still 200; so is no body.
	for _, body := range []any{map[string]any{}, nil} {
		c3 := call[client.Queue](t, env, "PUT", "/v1/queues/charlie", body, nil, http.StatusOK)
		wantC.UpdatedAt = c3.UpdatedAt
		require.Equal(t, wantC, c3)
	}

	// GET one.
	g := call[client.Queue](t, env, "GET", "/v1/queues/charlie", nil, keysOf(queueKeys, "queue"), http.StatusOK)
	wantC.UpdatedAt = g.UpdatedAt
	require.Equal(t, wantC, g)

	// GET all, sorted by name.
	list := getPage[struct {
		Queues []client.Queue `json:"queues"`
	}](t, env, "/v1/queues", []string{"queues", "next"}, nil)
	names := []string{}
	for _, q := range list.Queues {
		names = append(names, q.Name)
	}
	require.Equal(t, []string{"alpha", "bravo", "charlie"}, names)
	require.Equal(t, 7, list.Queues[2].MaxReceives)

	// DELETE: 204 with no body, then 404 everywhere.
	send(t, env, "charlie", msg("left behind"), msg("in flight", "delay_seconds", 0)) // charlie delays by 2 s
	flying := receive(t, env, "charlie", nil)
	require.Len(t, flying, 1)
	r = env.Do("DELETE", "/v1/queues/charlie", nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	require.Empty(t, r.Body)
	requireProblem(t, env.Do("GET", "/v1/queues/charlie", nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("DELETE", "/v1/queues/charlie", nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("POST", "/v1/queues/charlie/messages", map[string]any{"messages": []any{msg(1)}}),
		http.StatusNotFound, "not_found")
	r = env.Do("GET", "/v1/queues", nil)
	r.JSON(t, &list)
	require.Len(t, list.Queues, 2)

	// Recreating the name makes a fresh queue: defaults, and nothing of the
	// old one's messages.
	r = env.Do("PUT", "/v1/queues/charlie", nil)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r.JSON(t, &c)
	require.Equal(t, 5, c.MaxReceives)
	require.Equal(t, client.QueueStats{}, c.Stats)
	require.Empty(t, receive(t, env, "charlie", nil))
	require.Equal(t, []string{"stale"}, ack(t, env, "charlie", flying[0].Receipt),
		"a receipt of the deleted queue is stale on its successor")
}

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
	require.Equal(t, []client.Sent{{ID: first[0].ID, Duplicate: true}}, again)

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

func TestQueueNames(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	for _, name := range []string{"a", "A9", "orders.eu-west_1", "9lives", strings.Repeat("x", 128)} {
		r := env.Do("PUT", qpath(name), nil)
		require.Equal(t, http.StatusCreated, r.Status, "%q: %s", name, r.Body)
		require.Equal(t, name, getQueue(t, env, name).Name)
	}
}

// TestQueuePutWithoutChangeKeepsUpdatedAt: the spec defines updated_at as
// "when the queue's configuration last changed (its creation time if
// never)"; a PUT that changes nothing must not move it.
func TestQueuePutWithoutChangeKeepsUpdatedAt(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	created := putQueue(t, env, "same", map[string]any{"max_receives": 3})
	require.True(t, created.UpdatedAt.Equal(created.CreatedAt), "updated_at is the creation time at first")
	for _, body := range []map[string]any{nil, {}, {"max_receives": 3}} {
		q := putQueue(t, env, "same", body)
		require.True(t, q.UpdatedAt.Equal(created.UpdatedAt), "PUT %v changed nothing but moved updated_at: %v → %v",
			body, created.UpdatedAt, q.UpdatedAt)
	}
	changed := putQueue(t, env, "same", map[string]any{"max_receives": 4})
	require.True(t, changed.UpdatedAt.After(created.UpdatedAt))
}

// TestQueueSQSSettings: the settings REST has for the SQS model.
// receive_wait_seconds is the long poll of a receive without wait_seconds,
// max_message_size refuses a bigger message with 413 (exactly it fits),
// content_based_dedup gives a message without dedup_id its body's SHA-256
// (the same message again is a duplicate), tags are kept and replaced
// whole; out-of-range values are 400 and change nothing.
func TestQueueSQSSettings(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)

	r := env.Do("PUT", "/v1/queues/settings", map[string]any{"receive_wait_seconds": 2, "max_message_size": 1024,
		"content_based_dedup": true, "tags": map[string]string{"team": "billing", "env": "test"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	q := r.Map(t)
	require.EqualValues(t, 2, q["receive_wait_seconds"])
	require.EqualValues(t, 1024, q["max_message_size"])
	require.Equal(t, true, q["content_based_dedup"])
	require.Equal(t, map[string]any{"team": "billing", "env": "test"}, q["tags"])

	for _, bad := range []map[string]any{
		{"receive_wait_seconds": 21}, {"max_message_size": 1023}, {"max_message_size": 262145},
		{"tags": map[string]string{"": "x"}}, {"tags": map[string]string{strings.Repeat("k", 129): "x"}},
		{"tags": map[string]string{"k": strings.Repeat("v", 257)}}, {"tags": manyTags(51)},
	} {
		requireProblem(t, env.Do("PUT", "/v1/queues/settings", bad), http.StatusBadRequest, "invalid_request")
	}
	r = env.Do("GET", "/v1/queues/settings", nil)
	require.Equal(t, map[string]any{"team": "billing", "env": "test"}, r.Map(t)["tags"], "a refused PUT changes nothing")

	// A receive without wait_seconds waits the queue's 2 s; with 0, not.
	began := time.Now()
	require.Empty(t, receive(t, env, "settings", map[string]any{}))
	require.GreaterOrEqual(t, time.Since(began), 1900*time.Millisecond)
	began = time.Now()
	require.Empty(t, receive(t, env, "settings", map[string]any{"wait_seconds": 0}))
	require.Less(t, time.Since(began), 1900*time.Millisecond)

	// 1024 bytes of body and attributes fit; 1025 do not.
	body := strings.Repeat("a", 1024-2) // a JSON string: its quotes count
	sent := send(t, env, "settings", msg(body))
	requireProblem(t, env.Do("POST", qpath("settings", "/messages"), map[string]any{"messages": []any{msg(body + "a")}}),
		http.StatusRequestEntityTooLarge, "payload_too_large")
	// The same body without dedup_id is a duplicate by content.
	again := send(t, env, "settings", msg(body))
	require.True(t, again[0].Duplicate)
	require.Equal(t, sent[0].ID, again[0].ID)

	// tags replace the whole set; {} removes them.
	r = env.Do("PUT", "/v1/queues/settings", map[string]any{"tags": map[string]string{"only": "one"}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, map[string]any{"only": "one"}, r.Map(t)["tags"])
	r = env.Do("PUT", "/v1/queues/settings", map[string]any{"tags": map[string]string{}, "max_message_size": 0})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, map[string]any{}, r.Map(t)["tags"])
	require.EqualValues(t, 0, r.Map(t)["max_message_size"])
	require.EqualValues(t, 2, r.Map(t)["receive_wait_seconds"], "PUT keeps omitted fields")
}

// manyTags is n distinct tags.
func manyTags(n int) map[string]string {
	tags := map[string]string{}
	for i := range n {
		tags[fmt.Sprintf("k%d", i)] = "v"
	}
	return tags
}

// TestQueueMaxReceivesNever: max_receives 0 is a queue whose messages are
// never dead-lettered for their receives (an SQS queue without a
// RedrivePolicy): received and nacked far past the default 5, the message
// is delivered again each time; a nack with dead_letter still moves it.
// A subscription keeps 1-1000.
func TestQueueMaxReceivesNever(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	r := env.Do("PUT", "/v1/queues/forever", map[string]any{"max_receives": 0})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	require.EqualValues(t, 0, r.Map(t)["max_receives"])
	requireProblem(t, env.Do("PUT", "/v1/queues/forever", map[string]any{"max_receives": 2147483647}), http.StatusBadRequest, "invalid_request")
	require.EqualValues(t, 0, getQueue(t, env, "forever").MaxReceives)

	send(t, env, "forever", msg("again"))
	for i := range 12 {
		got := receive(t, env, "forever", map[string]any{})
		require.Len(t, got, 1, "receive %d", i+1)
		require.Equal(t, i+1, got[0].ReceiveCount)
		require.Equal(t, []string{"ok"}, settle(t, env, "forever", "nack", map[string]any{"receipts": receipts(got), "delay_seconds": 0}))
	}
	require.Zero(t, stats(t, env, "forever").DeadLetters)
	got := receive(t, env, "forever", map[string]any{})
	require.Len(t, got, 1)
	settle(t, env, "forever", "nack", map[string]any{"receipts": receipts(got), "dead_letter": true})
	require.EqualValues(t, 1, stats(t, env, "forever").DeadLetters)

	r = env.Do("PUT", "/v1/topics/t", nil)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	requireProblem(t, env.Do("PUT", "/v1/topics/t/subscriptions/s", map[string]any{"max_receives": 0}), http.StatusBadRequest, "invalid_request")
}
