package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// The typed helpers below (putQueue, send, receive, settle, ...) go
// through package client, the project's one client: its answers are the
// client's types. Tests whose subject is the wire (statuses, problem
// bodies, headers, malformed input) use call, rawDo and env.Do instead.

// pageJSON is a page of a list the client has no type for.
type pageJSON[T any] struct {
	Messages []T     `json:"messages"`
	Next     *string `json:"next"`
}

// Key sets of the response objects (API.md; the spec may add members, which
// these lists then name too).
var (
	queueKeys      = []string{"name", "visibility_timeout_seconds", "max_receives", "retention_seconds", "delay_seconds", "dedup_window_seconds", "max_depth", "retry_min_seconds", "retry_max_seconds", "dead_letter_queue", "dead_letter_sources", "push", "receive_wait_seconds", "max_message_size", "content_based_dedup", "tags", "created_at", "updated_at", "stats"}
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

// orNil is cfg as a request body: no body at all when cfg is nil.
func orNil(cfg map[string]any) any {
	if cfg == nil {
		return nil
	}
	return cfg
}

// call sends the request, requires one of the statuses, runs check (if
// any) on the decoded object, and decodes the body into a T.
func call[T any](t testing.TB, env *ferrytest.Env, method, path string, body any, check func(testing.TB, map[string]any), statuses ...int) T {
	t.Helper()
	r := env.Do(method, path, body)
	require.Contains(t, statuses, r.Status, "%s %s: %s", method, path, r.Body)
	if check != nil {
		check(t, r.Map(t))
	}
	var v T
	r.JSON(t, &v)
	return v
}

// requireArray requires obj[member] to be an array, never null, and runs
// each (if any) on its objects.
func requireArray(t testing.TB, obj map[string]any, member string, each func(testing.TB, map[string]any)) {
	t.Helper()
	list, ok := obj[member].([]any)
	require.True(t, ok, "%s is an array, never null: %v", member, obj[member])
	for _, x := range list {
		if each != nil {
			each(t, x.(map[string]any))
		}
	}
}

// keysOf is a check that an object has exactly keys.
func keysOf(keys []string, what string) func(testing.TB, map[string]any) {
	return func(t testing.TB, obj map[string]any) {
		t.Helper()
		requireKeys(t, obj, keys, what)
	}
}

// listKeys is a check that an answer's members are keys, the first an
// array whose objects each checks.
func listKeys(keys []string, each func(testing.TB, map[string]any)) func(testing.TB, map[string]any) {
	return func(t testing.TB, m map[string]any) {
		t.Helper()
		requireKeys(t, m, keys, keys[0]+" answer")
		requireArray(t, m, keys[0], each)
	}
}

// getPage GETs path and requires a 200 whose members are keys, the first
// an array whose objects each checks; it decodes the answer into a P.
func getPage[P any](t testing.TB, env *ferrytest.Env, path string, keys []string, each func(testing.TB, map[string]any)) P {
	t.Helper()
	return call[P](t, env, "GET", path, nil, listKeys(keys, each), http.StatusOK)
}

// requireNoContent requires a 204 without a body.
func requireNoContent(t testing.TB, r ferrytest.Response, what string) {
	t.Helper()
	require.Equal(t, http.StatusNoContent, r.Status, "%s: %s", what, r.Body)
	require.Empty(t, r.Body)
}

// pluck is f of each x.
func pluck[T, V any](xs []T, f func(T) V) []V {
	out := make([]V, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// withFields is m with the name/value pairs kv added.
func withFields(m map[string]any, kv []any) map[string]any {
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// api is package client pointed at env's server: the admin key, env's
// HTTP client (which checks every answer against the spec, key sets
// included: the spec's objects refuse members they do not list) and no
// retries, so a test sees every answer as it came.
func api(env *ferrytest.Env) *client.Client {
	return client.New(env.URL, ferrytest.AdminKey, client.WithHTTPClient(env.Client), client.WithRetries(0))
}

// typed is the request body m (a map, or any value encoding/json
// encodes; nil is the zero T) as the client's request type T. It must
// encode back to the same JSON: a member the client cannot say fails the
// test rather than being dropped.
func typed[T any](t testing.TB, m any) T {
	t.Helper()
	var v T
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	if string(raw) == "null" {
		return v
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&v), "the client's %T cannot say %s", v, raw)
	back, err := json.Marshal(v)
	require.NoError(t, err)
	require.JSONEq(t, string(raw), string(back), "the client's %T says %s otherwise", v, raw)
	return v
}

func putQueue(t testing.TB, env *ferrytest.Env, name string, cfg map[string]any) client.Queue {
	t.Helper()
	q, _, err := api(env).PutQueue(t.Context(), name, typed[client.QueueConfig](t, cfg))
	require.NoError(t, err, "put queue %s", name)
	return *q
}

func getQueue(t testing.TB, env *ferrytest.Env, name string) client.Queue {
	t.Helper()
	q, err := api(env).GetQueue(t.Context(), name)
	require.NoError(t, err, "get queue %s", name)
	return *q
}

func stats(t testing.TB, env *ferrytest.Env, name string) client.QueueStats {
	t.Helper()
	return getQueue(t, env, name).Stats
}

// counts is stats without oldest_age_seconds (zeroed), which moves by itself.
func counts(t testing.TB, env *ferrytest.Env, name string) client.QueueStats {
	t.Helper()
	s := stats(t, env, name)
	s.OldestAgeSeconds = 0
	return s
}

// msg builds one message of a send batch.
func msg(body any, kv ...any) map[string]any {
	return withFields(map[string]any{"body": body}, kv)
}

func send(t testing.TB, env *ferrytest.Env, q string, msgs ...map[string]any) []client.Sent {
	t.Helper()
	batch := pluck(msgs, func(m map[string]any) client.SendMessage { return typed[client.SendMessage](t, m) })
	out, err := api(env).SendBatch(t.Context(), q, batch)
	require.NoError(t, err, "send to %s", q)
	require.Len(t, out, len(msgs))
	return out
}

// sendEach sends n messages (the i-th made by mk), one request each, and
// returns their ids.
func sendEach(t testing.TB, env *ferrytest.Env, q string, n int, mk func(i int) map[string]any) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = send(t, env, q, mk(i))[0].ID
	}
	return out
}

func ids(sent []client.Sent) []string { return pluck(sent, func(s client.Sent) string { return s.ID }) }

func receive(t testing.TB, env *ferrytest.Env, q string, req map[string]any) []client.Message {
	t.Helper()
	out, err := api(env).Receive(t.Context(), q, typed[client.Receive](t, req))
	require.NoError(t, err, "receive from %s", q)
	require.NotNil(t, out, "messages must be [], never null")
	return out
}

func receipts(ms []client.Message) []string {
	return pluck(ms, func(m client.Message) string { return m.Receipt })
}

func msgIDs(ms []client.Message) []string {
	return pluck(ms, func(m client.Message) string { return m.ID })
}

// settler is the client's ack, nack and extend of one queue or subscription.
type settler struct {
	ack    func(ctx context.Context, receipts ...string) ([]client.ReceiptResult, error)
	nack   func(ctx context.Context, n client.Nack, receipts ...string) ([]client.ReceiptResult, error)
	extend func(ctx context.Context, vis time.Duration, receipts ...string) ([]client.ReceiptResult, error)
}

func queueSettler(c *client.Client, q string) settler {
	return settler{
		ack: func(ctx context.Context, rs ...string) ([]client.ReceiptResult, error) { return c.Ack(ctx, q, rs...) },
		nack: func(ctx context.Context, n client.Nack, rs ...string) ([]client.ReceiptResult, error) {
			return c.Nack(ctx, q, n, rs...)
		},
		extend: func(ctx context.Context, d time.Duration, rs ...string) ([]client.ReceiptResult, error) {
			return c.Extend(ctx, q, d, rs...)
		},
	}
}

// settle acks, nacks or extends (action) the receipts of req, its other
// members the nack's or extend's, and returns the statuses, after checking
// that each result names its receipt, in request order.
func settle(t testing.TB, env *ferrytest.Env, q, action string, req map[string]any) []string {
	t.Helper()
	return settleWith(t, queueSettler(api(env), q), action, req)
}

// settleWith is settle for the queue or subscription s settles.
func settleWith(t testing.TB, s settler, action string, req map[string]any) []string {
	t.Helper()
	rest := maps.Clone(req)
	sent := rest["receipts"].([]string)
	delete(rest, "receipts")
	var res []client.ReceiptResult
	var err error
	switch action {
	case "ack":
		require.Empty(t, rest, "an ack takes receipts only")
		res, err = s.ack(t.Context(), sent...)
	case "nack":
		res, err = s.nack(t.Context(), typed[client.Nack](t, rest), sent...)
	case "extend":
		vis := rest["visibility_timeout_seconds"].(int)
		require.Equal(t, map[string]any{"visibility_timeout_seconds": vis}, rest, "an extend takes receipts and a visibility")
		require.Positive(t, vis, "the client extends by at least a second")
		res, err = s.extend(t.Context(), time.Duration(vis)*time.Second, sent...)
	default:
		t.Fatalf("no action %q", action)
	}
	require.NoError(t, err, action)
	require.Len(t, res, len(sent))
	statuses := make([]string, len(sent))
	for i, r := range res {
		require.Equal(t, sent[i], r.Receipt, "results in request order")
		statuses[i] = r.Status
	}
	return statuses
}

func ack(t testing.TB, env *ferrytest.Env, q string, rs ...string) []string {
	t.Helper()
	return settle(t, env, q, "ack", map[string]any{"receipts": rs})
}

// deadLetters is one page of the queue's dead letters; query is "" or a
// query string of limit and after ("?limit=2&after=...").
func deadLetters(t testing.TB, env *ferrytest.Env, q, query string) client.DeadLetterPage {
	t.Helper()
	page, err := api(env).ListDeadLetters(t.Context(), q, pageOf(t, query))
	require.NoError(t, err, "dead letters of %s", q)
	require.NotNil(t, page.Messages)
	return *page
}

// pageOf is the client's Page for a query string of limit and after.
func pageOf(t testing.TB, query string) client.Page {
	t.Helper()
	v := queryParams(t, query, "limit", "after")
	p := client.Page{Limit: int(intParam(t, v, "limit")), After: v.Get("after")}
	require.True(t, p.Limit > 0 || !v.Has("limit"), "the client sends a positive limit only")
	return p
}

// queryParams parses a test's query string ("" or "?a=1&b=2") and requires
// it to name only the given parameters (the ones the client sends).
func queryParams(t testing.TB, query string, names ...string) url.Values {
	t.Helper()
	v, err := url.ParseQuery(strings.TrimPrefix(query, "?"))
	require.NoError(t, err)
	for k := range v {
		require.Contains(t, names, k, "query %s: the client's call takes %v", query, names)
	}
	return v
}

// intParam is v's parameter name as a number, 0 when absent.
func intParam(t testing.TB, v url.Values, name string) int64 {
	t.Helper()
	s := v.Get(name)
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err, "%s=%s", name, s)
	return n
}

// waitDeadLettered waits until the queue's one message, its last lease
// over, is dead-lettered by a claim (which then finds nothing), and
// returns the dead-letter page.
func waitDeadLettered(t testing.TB, env *ferrytest.Env, q string) client.DeadLetterPage {
	t.Helper()
	require.Eventually(t, func() bool {
		require.Empty(t, receive(t, env, q, nil))
		return len(deadLetters(t, env, q, "").Messages) == 1
	}, 10*time.Second, 50*time.Millisecond)
	page := deadLetters(t, env, q, "")
	require.Len(t, page.Messages, 1)
	return page
}

func repeat(s string, n int) []string { return slices.Repeat([]string{s}, n) }

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
	header http.Header
	body   []byte
	err    error
	took   time.Duration
}

// response is the answer as a ferrytest.Response.
func (a asyncResult) response() ferrytest.Response {
	return ferrytest.Response{Status: a.status, Header: a.header, Body: a.body}
}

// doAsync sends a request with the admin key through env's validating
// client without touching require, for use from a goroutine; a nil body
// is no body at all.
func doAsync(env *ferrytest.Env, method, path string, body any) asyncResult {
	return doAsyncAs(env, ferrytest.AdminKey, method, path, body)
}

// doAsyncAs is doAsync with the key whose secret this is.
func doAsyncAs(env *ferrytest.Env, secret, method, path string, body any) asyncResult {
	start := time.Now()
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return asyncResult{err: err}
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, env.URL+path, r)
	if err != nil {
		return asyncResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := env.Client.Do(req)
	if err != nil {
		return asyncResult{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return asyncResult{status: resp.StatusCode, header: resp.Header, body: b, err: err, took: time.Since(start)}
}

// decodeReceived decodes a receive answer from doAsync.
func decodeReceived(a asyncResult) ([]client.Message, error) {
	if a.err != nil {
		return nil, a.err
	}
	if a.status != http.StatusOK {
		return nil, fmt.Errorf("receive: status %d: %s", a.status, a.body)
	}
	var out struct {
		Messages []client.Message `json:"messages"`
	}
	if err := json.Unmarshal(a.body, &out); err != nil {
		return nil, err
	}
	if out.Messages == nil {
		return nil, fmt.Errorf("receive: messages is null: %s", a.body)
	}
	return out.Messages, nil
}

// parkedWithin waits, at most d, until env's server has more long polls
// parked than before (store.Notifier.Parked: found nothing and waiting
// for a wake-up), and says whether it saw that. A long poll counts as
// parked only after its first try, and it took the wake-up it waits for
// before that try: whatever happens next must wake it.
//
// (Tests used to find a parked long poll by its statement in
// pg_stat_activity; that trace is gone as soon as the pool lends the
// connection to another statement, which at a server's start is within
// milliseconds, so under load the park was often never seen.)
func parkedWithin(env *ferrytest.Env, before int64, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if env.Server.LongPollsParked() > before {
			return true
		}
	}
	return false
}

// startParked starts req in a goroutine and waits until env's server has
// parked it (see parkedWithin). Its answer comes on the channel.
func startParked(t testing.TB, env *ferrytest.Env, req func() asyncResult) <-chan asyncResult {
	t.Helper()
	before := env.Server.LongPollsParked()
	done := make(chan asyncResult, 1)
	go func() { done <- req() }()
	if parkedWithin(env, before, 10*time.Second) {
		return done
	}
	answer := "the request is not answered"
	select {
	case res := <-done:
		answer = fmt.Sprintf("the request was answered %d after %s (error %v): %s", res.status, res.took, res.err, res.body)
	default:
	}
	t.Fatalf("the long poll was never parked; %s; handler goroutines:\n%s", answer, handlerStacks())
	return nil
}

// handlerStacks is the stacks of the goroutines serving requests in this
// process (a failed park names where its request stands).
func handlerStacks() string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "ferry/handlers.") && strings.Contains(g, "echo") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// parked is startParked that also requires the request not to have been
// answered yet (what names it in the failure).
func parked(t testing.TB, what string, env *ferrytest.Env, req func() asyncResult) <-chan asyncResult {
	t.Helper()
	done := startParked(t, env, req)
	select {
	case res := <-done:
		t.Fatalf("%s: the long poll returned before any publish: %d %s after %s", what, res.status, res.body, res.took)
	default:
	}
	return done
}

// requireOK requires an asynchronous request to have been answered 200.
func requireOK(t testing.TB, res asyncResult) {
	t.Helper()
	requireStatus(t, res, http.StatusOK)
}

// requireStatus requires an asynchronous request to have been answered
// with status.
func requireStatus(t testing.TB, res asyncResult, status int) {
	t.Helper()
	require.NoError(t, res.err)
	require.Equal(t, status, res.status, "%s", res.body)
}

// decodeAsync requires an asynchronous request to have been answered with
// status and decodes the body into a T.
func decodeAsync[T any](t testing.TB, res asyncResult, status int) T {
	t.Helper()
	requireStatus(t, res, status)
	var v T
	require.NoError(t, json.Unmarshal(res.body, &v))
	return v
}

// eventuallyNone waits until the count query (on the server's pool)
// answers 0: the rows a cleanup job removes are gone.
func eventuallyNone(t testing.TB, env *ferrytest.Env, query, what string) {
	t.Helper()
	pool := env.Server.Pool()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(context.Background(), query).Scan(&n)
		return err == nil && n == 0
	}, 20*time.Second, 20*time.Millisecond, what)
}

// dbConn connects to the database, closed when the test ends.
func dbConn(t testing.TB, dbURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
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
