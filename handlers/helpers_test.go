package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/ferrytest"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// The shapes of API.md, decoded. Key sets are checked separately with
// requireKeys, so these structs only carry values.

type queueJSON struct {
	Name                     string    `json:"name"`
	VisibilityTimeoutSeconds int       `json:"visibility_timeout_seconds"`
	MaxReceives              int       `json:"max_receives"`
	RetentionSeconds         int       `json:"retention_seconds"`
	DelaySeconds             int       `json:"delay_seconds"`
	DedupWindowSeconds       int       `json:"dedup_window_seconds"`
	MaxDepth                 int64     `json:"max_depth"`
	RetryMinSeconds          int       `json:"retry_min_seconds"`
	RetryMaxSeconds          int       `json:"retry_max_seconds"`
	CreatedAt                time.Time `json:"created_at"`
	UpdatedAt                time.Time `json:"updated_at"`
	Stats                    statsJSON `json:"stats"`
}

type statsJSON struct {
	Available        int64 `json:"available"`
	InFlight         int64 `json:"in_flight"`
	Delayed          int64 `json:"delayed"`
	DeadLetters      int64 `json:"dead_letters"`
	OldestAgeSeconds int64 `json:"oldest_age_seconds"`
}

type sentJSON struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

type receivedJSON struct {
	ID           string            `json:"id"`
	Body         json.RawMessage   `json:"body"`
	Attributes   map[string]string `json:"attributes"`
	Group        *string           `json:"group"`
	DedupID      *string           `json:"dedup_id"`
	Receipt      string            `json:"receipt"`
	ReceiveCount int               `json:"receive_count"`
	SentAt       time.Time         `json:"sent_at"`
}

type resultJSON struct {
	Receipt string `json:"receipt"`
	Status  string `json:"status"`
}

type deadLetterJSON struct {
	ID             string            `json:"id"`
	Body           json.RawMessage   `json:"body"`
	Attributes     map[string]string `json:"attributes"`
	Group          *string           `json:"group"`
	ReceiveCount   int               `json:"receive_count"`
	LastError      *string           `json:"last_error"`
	SentAt         time.Time         `json:"sent_at"`
	DeadLetteredAt time.Time         `json:"dead_lettered_at"`
}

type deadLetterPageJSON struct {
	Messages []deadLetterJSON `json:"messages"`
	Next     *string          `json:"next"`
}

// Key sets of the response objects (API.md; the spec may add members, which
// these lists then name too).
var (
	queueKeys      = []string{"name", "visibility_timeout_seconds", "max_receives", "retention_seconds", "delay_seconds", "dedup_window_seconds", "max_depth", "retry_min_seconds", "retry_max_seconds", "push", "created_at", "updated_at", "stats"}
	statsKeys      = []string{"available", "in_flight", "delayed", "dead_letters", "oldest_age_seconds"}
	receivedKeys   = []string{"id", "body", "attributes", "group", "dedup_id", "receipt", "receive_count", "sent_at"}
	deadLetterKeys = []string{"id", "body", "attributes", "group", "dedup_id", "receive_count", "last_error", "sent_at", "dead_lettered_at"}
	problemKeys    = []string{"type", "title", "status", "detail", "code"}
)

// forTest returns a copy of env whose failures go to t (a subtest), with its
// own validating client.
func forTest(env *ferrytest.Env, t *testing.T) *ferrytest.Env {
	e := *env
	e.T = t
	e.Client = openapitest.New(t).Client(t, nil)
	return &e
}

// withLimits and withPoll are server options.
func withLimits(body int, request int64) ferrytest.Option {
	return func(c *server.Config) {
		if body > 0 {
			c.MaxBodyBytes = body
		}
		if request > 0 {
			c.MaxRequestBytes = request
		}
	}
}

func withPoll(d time.Duration) ferrytest.Option {
	return func(c *server.Config) { c.FallbackPoll = d }
}

func qpath(q string, rest ...string) string {
	return "/v1/queues/" + url.PathEscape(q) + strings.Join(rest, "")
}

// requireKeys checks that the JSON object has exactly these members.
func requireKeys(t testing.TB, obj map[string]any, keys []string, what string) {
	t.Helper()
	got := make([]string, 0, len(obj))
	for k := range obj {
		got = append(got, k)
	}
	sort.Strings(got)
	want := append([]string(nil), keys...)
	sort.Strings(want)
	require.Equal(t, want, got, "members of %s", what)
}

// requireProblem checks an RFC 9457 problem with all five members, the
// given status and code.
func requireProblem(t testing.TB, r ferrytest.Response, status int, code string) map[string]any {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Body)
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "application/problem+json", mt)
	var p map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &p), "body: %s", r.Body)
	for _, k := range problemKeys {
		require.Contains(t, p, k, "problem member %q, body %s", k, r.Body)
	}
	for _, k := range []string{"type", "title", "detail", "code"} {
		s, ok := p[k].(string)
		require.True(t, ok && s != "", "problem member %q must be a non-empty string: %s", k, r.Body)
	}
	require.EqualValues(t, status, p["status"], "problem status member")
	require.Equal(t, code, p["code"], "problem code; body %s", r.Body)
	return p
}

func putQueue(t testing.TB, env *ferrytest.Env, name string, cfg map[string]any) queueJSON {
	t.Helper()
	var body any
	if cfg != nil {
		body = cfg
	}
	r := env.Do("PUT", qpath(name), body)
	require.Contains(t, []int{http.StatusCreated, http.StatusOK}, r.Status, "PUT %s: %s", name, r.Body)
	var q queueJSON
	r.JSON(t, &q)
	return q
}

func getQueue(t testing.TB, env *ferrytest.Env, name string) queueJSON {
	t.Helper()
	r := env.Do("GET", qpath(name), nil)
	require.Equal(t, http.StatusOK, r.Status, "GET %s: %s", name, r.Body)
	var q queueJSON
	r.JSON(t, &q)
	return q
}

func stats(t testing.TB, env *ferrytest.Env, name string) statsJSON {
	t.Helper()
	return getQueue(t, env, name).Stats
}

// counts is stats without oldest_age_seconds (zeroed), which moves by itself.
func counts(t testing.TB, env *ferrytest.Env, name string) statsJSON {
	t.Helper()
	s := stats(t, env, name)
	s.OldestAgeSeconds = 0
	return s
}

// msg builds one message of a send batch.
func msg(body any, kv ...any) map[string]any {
	m := map[string]any{"body": body}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func send(t testing.TB, env *ferrytest.Env, q string, msgs ...map[string]any) []sentJSON {
	t.Helper()
	r := env.Do("POST", qpath(q, "/messages"), map[string]any{"messages": msgs})
	require.Equal(t, http.StatusCreated, r.Status, "send: %s", r.Body)
	var out struct {
		Messages []sentJSON `json:"messages"`
	}
	r.JSON(t, &out)
	require.Len(t, out.Messages, len(msgs))
	return out.Messages
}

func ids(sent []sentJSON) []string {
	out := make([]string, len(sent))
	for i, s := range sent {
		out[i] = s.ID
	}
	return out
}

func receive(t testing.TB, env *ferrytest.Env, q string, req map[string]any) []receivedJSON {
	t.Helper()
	var body any
	if req != nil {
		body = req
	}
	r := env.Do("POST", qpath(q, "/receive"), body)
	require.Equal(t, http.StatusOK, r.Status, "receive: %s", r.Body)
	var out struct {
		Messages []receivedJSON `json:"messages"`
	}
	r.JSON(t, &out)
	require.NotNil(t, out.Messages, "messages must be [], never null: %s", r.Body)
	return out.Messages
}

func receipts(ms []receivedJSON) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Receipt
	}
	return out
}

func msgIDs(ms []receivedJSON) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// settle posts receipts to ack, nack or extend and returns the statuses, after
// checking that each result names its receipt, in request order.
func settle(t testing.TB, env *ferrytest.Env, q, action string, req map[string]any) []string {
	t.Helper()
	r := env.Do("POST", qpath(q, "/"+action), req)
	require.Equal(t, http.StatusOK, r.Status, "%s: %s", action, r.Body)
	var out struct {
		Results []resultJSON `json:"results"`
	}
	r.JSON(t, &out)
	sent := req["receipts"].([]string)
	require.Len(t, out.Results, len(sent))
	statuses := make([]string, len(sent))
	for i, res := range out.Results {
		require.Equal(t, sent[i], res.Receipt, "results in request order")
		statuses[i] = res.Status
	}
	return statuses
}

func ack(t testing.TB, env *ferrytest.Env, q string, rs ...string) []string {
	t.Helper()
	return settle(t, env, q, "ack", map[string]any{"receipts": rs})
}

func deadLetters(t testing.TB, env *ferrytest.Env, q, query string) deadLetterPageJSON {
	t.Helper()
	r := env.Do("GET", qpath(q, "/dead-letters")+query, nil)
	require.Equal(t, http.StatusOK, r.Status, "dead letters: %s", r.Body)
	var page deadLetterPageJSON
	r.JSON(t, &page)
	require.NotNil(t, page.Messages)
	return page
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// rawDo sends a request with a plain client (for routes outside the spec,
// like a 405) and returns the response.
func rawDo(t testing.TB, env *ferrytest.Env, method, path string, body []byte, header http.Header) ferrytest.Response {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, env.URL+path, r)
	require.NoError(t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return ferrytest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}

// asyncResult is the outcome of a request made from another goroutine,
// where require must not be used.
type asyncResult struct {
	status int
	body   []byte
	err    error
	took   time.Duration
}

// doAsync sends a request with the admin key through env's validating
// client without touching require, for use from a goroutine.
func doAsync(env *ferrytest.Env, method, path string, body any) asyncResult {
	start := time.Now()
	raw, err := json.Marshal(body)
	if err != nil {
		return asyncResult{err: err}
	}
	req, err := http.NewRequest(method, env.URL+path, bytes.NewReader(raw))
	if err != nil {
		return asyncResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+ferrytest.AdminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := env.Client.Do(req)
	if err != nil {
		return asyncResult{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return asyncResult{status: resp.StatusCode, body: b, err: err, took: time.Since(start)}
}

// decodeReceived decodes a receive answer from doAsync.
func decodeReceived(a asyncResult) ([]receivedJSON, error) {
	if a.err != nil {
		return nil, a.err
	}
	if a.status != http.StatusOK {
		return nil, fmt.Errorf("receive: status %d: %s", a.status, a.body)
	}
	var out struct {
		Messages []receivedJSON `json:"messages"`
	}
	if err := json.Unmarshal(a.body, &out); err != nil {
		return nil, err
	}
	if out.Messages == nil {
		return nil, fmt.Errorf("receive: messages is null: %s", a.body)
	}
	return out.Messages, nil
}

// parkedQuery waits until a session of the server whose connections carry
// application_name app has run a statement matching the LIKE pattern
// after since (the database's clock) and is idle: a long poll found
// nothing and now waits, so what happens next must wake it.
func parkedQuery(t testing.TB, dbURL, app string, since time.Time, pattern string) {
	t.Helper()
	require.True(t, parkedWithin(t, dbURL, app, since, pattern, 10*time.Second),
		"the server (%s) never ran a statement like %s", app, pattern)
}

// parkedWithin is parkedQuery's wait, at most d: whether it saw the park.
func parkedWithin(t testing.TB, dbURL, app string, since time.Time, pattern string, d time.Duration) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		var n int
		err := conn.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()
				AND query LIKE $3 AND query_start >= $2 AND state = 'idle'`, app, since, pattern).Scan(&n)
		if err == nil && n > 0 {
			return true
		}
	}
	return false
}

// dbNow reads the database's clock.
func dbNow(t testing.TB, dbURL string) time.Time {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var now time.Time
	require.NoError(t, conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now))
	return now
}
