package handlers_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/push"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// Push delivery (API.md § Push delivery, docs/webhooks.md), end to end:
// a real server pushing to real local HTTP receivers, some of which
// misbehave on purpose.

// allowPrivatePush lets push URLs name loopback addresses, where the
// receivers of these tests listen.
func allowPrivatePush(c *server.Config) { c.AllowPrivatePush = true }

// traceparent is a W3C trace context, from the specification's example.
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// waitFor is how long a test waits for something that should happen.
const waitFor = 15 * time.Second

var (
	pushKeys        = []string{"url", "timeout_seconds", "max_in_flight", "rate_limit_per_second", "format", "failing_since", "disabled_at", "disabled_reason"}
	attemptKeys     = []string{"message_id", "attempt", "status_code", "error", "duration_ms", "at"}
	pushMessageKeys = []string{"id", "body", "attributes", "group", "dedup_id", "receive_count", "sent_at"}
)

// hookRequest is one request a receiver got.
type hookRequest struct {
	n      int // arrival number, from 1
	method string
	path   string
	header http.Header
	body   []byte
	at     time.Time
	// done is closed when the test ends: a handler that blocks must
	// return then.
	done <-chan struct{}
}

func (h hookRequest) id() string { return h.header.Get("webhook-id") }

// receiver is a real HTTP endpoint that records every request (body read
// in full) before answer answers it (nil: 204).
type receiver struct {
	srv  *httptest.Server
	done chan struct{}
	mu   sync.Mutex
	reqs []hookRequest
}

// newReceiver starts a receiver, closed when the test ends. Start it after
// the Ferry server, so it is closed first and its blocked handlers let the
// server's shutdown finish.
func newReceiver(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, h hookRequest)) *receiver {
	t.Helper()
	rc := &receiver{done: make(chan struct{})}
	done := rc.done
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		h := hookRequest{
			n: len(rc.reqs) + 1, method: r.Method, path: r.URL.Path, header: r.Header.Clone(),
			body: body, at: time.Now(), done: done,
		}
		rc.reqs = append(rc.reqs, h)
		rc.mu.Unlock()
		if answer == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		answer(w, r, h)
	}))
	t.Cleanup(func() {
		close(rc.done)
		rc.srv.Close()
	})
	return rc
}

func (rc *receiver) url() string { return rc.srv.URL + "/hook" }

func (rc *receiver) requests() []hookRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.reqs)
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.reqs)
}

// wait waits for at least n requests and returns them all.
func (rc *receiver) wait(t testing.TB, n int) []hookRequest {
	t.Helper()
	eventually(t, fmt.Sprintf("%d requests at the receiver", n), func() bool { return rc.count() >= n })
	return rc.requests()
}

// block holds a request until the test ends, its client gives up, or d.
func block(r *http.Request, h hookRequest, d time.Duration) {
	select {
	case <-h.done:
	case <-r.Context().Done():
	case <-time.After(d):
	}
}

// eventually polls cond until it holds, failing the test after waitFor.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ferrytest.WaitFor(t, waitFor, what, cond)
}

// stays checks that cond holds throughout d: for "nothing more happens".
func stays(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		require.True(t, cond(), what)
	}
}

// requireSecret checks a signing secret's form: whsec_ and the base64 of
// at least 24 bytes.
func requireSecret(t testing.TB, s string) {
	t.Helper()
	enc, ok := strings.CutPrefix(s, "whsec_")
	require.True(t, ok, "secret %q starts with whsec_", s)
	key, err := base64.StdEncoding.DecodeString(enc)
	require.NoError(t, err, "secret %q", s)
	require.GreaterOrEqual(t, len(key), 24, "secret key bytes")
}

// putPush PUTs a queue or subscription (path) and requires status; its
// members are keys, plus a signing_secret, which is returned ("" when
// absent), with the push member.
func putPush(t testing.TB, env *ferrytest.Env, path string, cfg map[string]any, status int, keys []string) (*client.Push, string) {
	t.Helper()
	r := env.Do("PUT", path, orNil(cfg))
	require.Equal(t, status, r.Status, "PUT %s: %s", path, r.Body)
	m := r.Map(t)
	want := keys
	secret, _ := m["signing_secret"].(string)
	if _, ok := m["signing_secret"]; ok {
		want = append(slices.Clone(keys), "signing_secret")
		requireSecret(t, secret)
	}
	requireKeys(t, m, want, "PUT answer")
	return decodePush(t, m), secret
}

func decodePush(t testing.TB, m map[string]any) *client.Push {
	t.Helper()
	require.Contains(t, m, "push")
	if m["push"] == nil {
		return nil
	}
	requireKeys(t, m["push"].(map[string]any), pushKeys, "push")
	raw, err := json.Marshal(m["push"])
	require.NoError(t, err)
	var p client.Push
	require.NoError(t, json.Unmarshal(raw, &p))
	return &p
}

// newPushSub creates a push subscription and returns its secret.
func newPushSub(t testing.TB, env *ferrytest.Env, topic, sub string, cfg map[string]any) string {
	t.Helper()
	_, secret := putPush(t, env, spath(topic, sub), cfg, http.StatusCreated, subscriptionKeys)
	require.NotEmpty(t, secret, "the PUT that creates a push subscription issues its secret")
	return secret
}

// getPush GETs a queue or subscription (path): its push member and stats.
// GET never shows a signing secret.
func getPush(t testing.TB, env *ferrytest.Env, path string, keys []string) (*client.Push, client.QueueStats) {
	t.Helper()
	r := env.Do("GET", path, nil)
	require.Equal(t, http.StatusOK, r.Status, "GET %s: %s", path, r.Body)
	m := r.Map(t)
	requireKeys(t, m, keys, "GET answer")
	var out struct {
		Stats client.QueueStats `json:"stats"`
	}
	r.JSON(t, &out)
	out.Stats.OldestAgeSeconds = 0
	return decodePush(t, m), out.Stats
}

func subPush(t testing.TB, env *ferrytest.Env, topic, sub string) (*client.Push, client.QueueStats) {
	t.Helper()
	return getPush(t, env, spath(topic, sub), subscriptionKeys)
}

// attempts lists a target's push attempts (path: the queue's or
// subscription's) with the query string.
func attempts(t testing.TB, env *ferrytest.Env, path, query string) []client.PushAttempt {
	t.Helper()
	return getPage[struct {
		Attempts []client.PushAttempt `json:"attempts"`
	}](t, env, path+"/attempts"+query, []string{"attempts"}, keysOf(attemptKeys, "attempt")).Attempts
}

// waitAttempts waits until the target has recorded at least n attempts
// and returns them all, newest first.
func waitAttempts(t testing.TB, env *ferrytest.Env, path string, n int) []client.PushAttempt {
	t.Helper()
	var got []client.PushAttempt
	eventually(t, fmt.Sprintf("%d attempts of %s", n, path), func() bool {
		got = attempts(t, env, path, "?limit=1000")
		return len(got) >= n
	})
	return got
}

// waitDrained waits until the subscription has nothing pending.
func waitDrained(t testing.TB, env *ferrytest.Env, topic, sub string) {
	t.Helper()
	eventually(t, "subscription "+sub+" drained", func() bool {
		s := subCounts(t, env, topic, sub)
		return s.Available == 0 && s.InFlight == 0 && s.Delayed == 0
	})
}

func statusOf(a client.PushAttempt) int {
	if a.StatusCode == nil {
		return 0
	}
	return *a.StatusCode
}

func errorOf(a client.PushAttempt) string {
	if a.Error == nil {
		return ""
	}
	return *a.Error
}

// fast makes failed pushes retry at once.
func fast(cfg map[string]any) map[string]any {
	cfg["retry_min_seconds"] = 0
	cfg["retry_max_seconds"] = 1
	return cfg
}

// failFirst answers the first n requests with code, the others with 204.
func failFirst(n, code int) func(w http.ResponseWriter, r *http.Request, h hookRequest) {
	return func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		if h.n <= n {
			w.WriteHeader(code)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// failWhile answers code while fail holds, and 204 otherwise.
func failWhile(fail func() bool, code int) func(w http.ResponseWriter, r *http.Request, h hookRequest) {
	return func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		if fail() {
			w.WriteHeader(code)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// firstThen answers the first request with first, the others with 204.
func firstThen(first func(w http.ResponseWriter, r *http.Request, h hookRequest)) func(w http.ResponseWriter, r *http.Request, h hookRequest) {
	return func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		if h.n == 1 {
			first(w, r, h)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// pushOne creates topic "t" with push subscription "s" (cfg, retrying
// fast), publishes one event with the id (and kv), and returns the
// subscription's signing secret.
func pushOne(t testing.TB, env *ferrytest.Env, cfg map[string]any, id string, kv ...any) string {
	t.Helper()
	putTopic(t, env, "t", nil, http.StatusCreated)
	secret := newPushSub(t, env, "t", "s", fast(cfg))
	publishEvents(t, env, "t", evt("e", append([]any{"id", id}, kv...)...))
	return secret
}

// waitDeadLetters waits until done holds for the number of t/s's dead
// letters and returns them.
func waitDeadLetters(t testing.TB, env *ferrytest.Env, done func(n int) bool) client.EventDeadLetterPage {
	t.Helper()
	var dl client.EventDeadLetterPage
	eventually(t, "the dead letters", func() bool {
		dl = subDeadLetters(t, env, "t", "s", "")
		return done(len(dl.Messages))
	})
	return dl
}

// TestPushSignedDelivery: a push subscription POSTs each event, signed per
// Standard Webhooks with the secret shown once.
func TestPushSignedDelivery(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	rc := newReceiver(t, nil)
	putTopic(t, env, "orders", map[string]any{"partitions": 2}, http.StatusCreated)

	secret := newPushSub(t, env, "orders", "hook", fast(map[string]any{"push": map[string]any{"url": rc.url()}}))
	p, _ := subPush(t, env, "orders", "hook")
	require.Equal(t, &client.Push{URL: rc.url(), TimeoutSeconds: 10, MaxInFlight: 10, Format: "standard"}, p, "push with its defaults, enabled")
	// A later PUT keeps the secret and does not show it again.
	_, again := putPush(t, env, spath("orders", "hook"), map[string]any{"push": map[string]any{"url": rc.url()}}, http.StatusOK, subscriptionKeys)
	require.Empty(t, again, "the secret is shown once")

	pub := publishEvents(t, env, "orders",
		evt("order.created", "id", "evt-1", "key", "ORD-1", "data", map[string]any{"n": 1, "s": "é"},
			"attributes", map[string]any{"traceparent": traceparent, "region": "eu"}))
	require.Equal(t, "evt-1", pub[0].ID)
	h := rc.wait(t, 1)[0]
	require.Equal(t, http.MethodPost, h.method)
	require.Equal(t, "/hook", h.path)
	require.Equal(t, "application/json", h.header.Get("Content-Type"))
	require.True(t, strings.HasPrefix(h.header.Get("User-Agent"), "Ferry/"), "User-Agent %q", h.header.Get("User-Agent"))
	require.Equal(t, traceparent, h.header.Get("traceparent"), "traceparent passed through")
	require.Equal(t, "evt-1", h.id(), "webhook-id is the event id")
	require.Len(t, strings.Fields(h.header.Get("webhook-signature")), 1, "one secret, one signature")
	require.NoError(t, push.Verify(secret, h.header, h.body, time.Now(), 0))
	require.ErrorIs(t, push.Verify(push.NewSigningSecret(), h.header, h.body, time.Now(), 0), push.ErrWebhookSignature)

	// The body is the event, as the log holds it.
	var body map[string]any
	require.NoError(t, json.Unmarshal(h.body, &body), "body %s", h.body)
	requireKeys(t, body, eventKeys, "pushed event")
	var ev client.Event
	require.NoError(t, json.Unmarshal(h.body, &ev))
	requireSameEvent(t, logEvents(t, env, "orders")["evt-1"], ev, "pushed event")

	// Acked: nothing pending, one successful attempt.
	waitDrained(t, env, "orders", "hook")
	as := waitAttempts(t, env, spath("orders", "hook"), 1)
	require.Len(t, as, 1)
	require.Equal(t, "evt-1", as[0].MessageID)
	require.Equal(t, 1, as[0].Attempt)
	require.Equal(t, http.StatusNoContent, statusOf(as[0]))
	require.Nil(t, as[0].Error)
	require.GreaterOrEqual(t, as[0].DurationMS, int64(0))
	require.WithinDuration(t, time.Now(), as[0].At, time.Minute)

	// Without a traceparent attribute there is no traceparent header.
	publishEvents(t, env, "orders", evt("order.created", "id", "evt-2"))
	h = rc.wait(t, 2)[1]
	require.Equal(t, "evt-2", h.id())
	require.Empty(t, h.header.Values("traceparent"))
	require.NoError(t, push.Verify(secret, h.header, h.body, time.Now(), 0))
	waitDrained(t, env, "orders", "hook")
	require.Equal(t, 2, rc.count(), "each event pushed once")
}

// TestPushQueue: a push queue POSTs each message as a consumer would
// receive it.
func TestPushQueue(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	rc := newReceiver(t, nil)

	cfg := fast(map[string]any{"push": map[string]any{
		"url": rc.url(), "timeout_seconds": 5, "max_in_flight": 3, "rate_limit_per_second": 100,
	}})
	p, secret := putPush(t, env, qpath("jobs"), cfg, http.StatusCreated, queueKeys)
	require.NotEmpty(t, secret, "the PUT that creates a push queue issues its secret")
	require.Equal(t, &client.Push{URL: rc.url(), TimeoutSeconds: 5, MaxInFlight: 3, RateLimitPerSecond: 100, Format: "standard"}, p)
	got, _ := getPush(t, env, qpath("jobs"), queueKeys)
	require.Equal(t, p, got)

	sent := send(t, env, "jobs", msg(map[string]any{"order_id": "ORD-1"},
		"attributes", map[string]any{"traceparent": traceparent, "type": "order.created"},
		"group", "acct-1", "dedup_id", "d-1"))
	h := rc.wait(t, 1)[0]
	require.Equal(t, sent[0].ID, h.id(), "webhook-id is the message id")
	require.Equal(t, "application/json", h.header.Get("Content-Type"))
	require.Equal(t, traceparent, h.header.Get("traceparent"))
	require.NoError(t, push.Verify(secret, h.header, h.body, time.Now(), 0))

	var body map[string]any
	require.NoError(t, json.Unmarshal(h.body, &body), "body %s", h.body)
	requireKeys(t, body, pushMessageKeys, "pushed message")
	var m client.Message
	require.NoError(t, json.Unmarshal(h.body, &m))
	require.Equal(t, sent[0].ID, m.ID)
	require.JSONEq(t, `{"order_id": "ORD-1"}`, string(m.Body))
	require.Equal(t, map[string]string{"traceparent": traceparent, "type": "order.created"}, m.Attributes)
	require.Equal(t, "acct-1", *m.Group)
	require.Equal(t, "d-1", *m.DedupID)
	require.Equal(t, 1, m.ReceiveCount)
	require.WithinDuration(t, time.Now(), m.SentAt, time.Minute)

	eventually(t, "the queue drained", func() bool { return counts(t, env, "jobs") == client.QueueStats{} })
	as := waitAttempts(t, env, qpath("jobs"), 1) // recorded after the ack
	require.Len(t, as, 1)
	require.Equal(t, sent[0].ID, as[0].MessageID)
	require.Equal(t, http.StatusNoContent, statusOf(as[0]))
}

// TestPushRetriesKeepWebhookID: retries carry the same webhook-id and body;
// every attempt is listed, newest first.
func TestPushRetriesKeepWebhookID(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	rc := newReceiver(t, failFirst(2, http.StatusInternalServerError))
	secret := pushOne(t, env, map[string]any{"push": map[string]any{"url": rc.url()}}, "evt-r", "data", map[string]any{"x": 1})

	reqs := rc.wait(t, 3)
	for _, h := range reqs {
		require.Equal(t, "evt-r", h.id(), "webhook-id stable across retries")
		require.Equal(t, string(reqs[0].body), string(h.body), "same body on every attempt")
		require.NoError(t, push.Verify(secret, h.header, h.body, time.Now(), 0), "attempt %d", h.n)
	}
	waitDrained(t, env, "t", "s")

	path := spath("t", "s")
	as := waitAttempts(t, env, path, 3)
	require.Len(t, as, 3)
	require.Equal(t, []int{3, 2, 1}, []int{as[0].Attempt, as[1].Attempt, as[2].Attempt}, "newest first")
	require.Equal(t, []int{204, 500, 500}, []int{statusOf(as[0]), statusOf(as[1]), statusOf(as[2])})
	require.Nil(t, as[0].Error)
	require.Contains(t, errorOf(as[1]), "500")
	for i, a := range as {
		require.Equal(t, "evt-r", a.MessageID)
		if i > 0 {
			require.False(t, a.At.After(as[i-1].At), "newest first")
		}
	}
	failed := attempts(t, env, path, "?status=failed")
	require.Len(t, failed, 2)
	require.Equal(t, []int{2, 1}, []int{failed[0].Attempt, failed[1].Attempt})
	ok := attempts(t, env, path, "?status=succeeded")
	require.Len(t, ok, 1)
	require.Equal(t, 3, ok[0].Attempt)
	one := attempts(t, env, path, "?limit=1")
	require.Len(t, one, 1)
	require.Equal(t, 3, one[0].Attempt)

	p, _ := subPush(t, env, "t", "s")
	require.Nil(t, p.FailingSince, "a success ends the failing state")
	require.Nil(t, p.DisabledAt)
	require.Equal(t, 3, rc.count(), "acked: not sent again")
	require.Empty(t, subDeadLetters(t, env, "t", "s", "").Messages)
}

// TestPushDeadLetters: after max_receives failed attempts the event is
// dead-lettered and not pushed again, until redriven.
func TestPushDeadLetters(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	var healthy atomic.Bool
	rc := newReceiver(t, failWhile(func() bool { return !healthy.Load() }, http.StatusInternalServerError))
	pushOne(t, env, map[string]any{"max_receives": 2, "push": map[string]any{"url": rc.url()}}, "evt-d")

	dl := waitDeadLetters(t, env, func(n int) bool { return n > 0 })
	require.Len(t, dl.Messages, 1)
	require.Equal(t, "evt-d", dl.Messages[0].ID)
	require.Equal(t, 2, dl.Messages[0].ReceiveCount)
	require.NotNil(t, dl.Messages[0].LastError)
	require.Contains(t, *dl.Messages[0].LastError, "500")
	require.Equal(t, client.QueueStats{DeadLetters: 1}, subCounts(t, env, "t", "s"))
	as := waitAttempts(t, env, spath("t", "s"), 2)
	require.Len(t, as, 2)
	require.Equal(t, []int{2, 1}, []int{as[0].Attempt, as[1].Attempt})
	require.Equal(t, 2, rc.count(), "max_receives attempts, then no more")
	p, _ := subPush(t, env, "t", "s")
	require.NotNil(t, p.FailingSince, "every attempt failed")
	require.WithinDuration(t, time.Now(), *p.FailingSince, time.Minute)
	require.Nil(t, p.DisabledAt, "failing for seconds does not disable")

	// Redriven, it is pushed again, with the same webhook-id.
	healthy.Store(true)
	require.Equal(t, 1, redriveSub(t, env, "t", "s", map[string]any{"ids": []string{"evt-d"}}))
	h := rc.wait(t, 3)[2]
	require.Equal(t, "evt-d", h.id())
	waitDrained(t, env, "t", "s")
	require.Empty(t, subDeadLetters(t, env, "t", "s", "").Messages)
}

// TestPushGoneDisables: a 410 Gone disables push; nothing is pushed until
// it is enabled again, and then the backlog is.
func TestPushGoneDisables(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	var gone atomic.Bool
	gone.Store(true)
	rc := newReceiver(t, failWhile(gone.Load, http.StatusGone))
	pushOne(t, env, map[string]any{"push": map[string]any{"url": rc.url()}}, "evt-g1")
	rc.wait(t, 1)

	var p *client.Push
	eventually(t, "push disabled", func() bool {
		p, _ = subPush(t, env, "t", "s")
		return p.DisabledAt != nil
	})
	require.WithinDuration(t, time.Now(), *p.DisabledAt, time.Minute)
	require.NotNil(t, p.DisabledReason)
	require.Contains(t, *p.DisabledReason, "410")
	as := waitAttempts(t, env, spath("t", "s"), 1)
	require.Equal(t, http.StatusGone, statusOf(as[0]))

	// Disabled: a new event waits, with the first, and nothing is pushed.
	publishEvents(t, env, "t", evt("e", "id", "evt-g2"))
	eventually(t, "both events available", func() bool {
		return subCounts(t, env, "t", "s") == client.QueueStats{Available: 2}
	})
	stays(t, 1200*time.Millisecond, "nothing is pushed while disabled", func() bool { return rc.count() == 1 })

	// Enabled again: the backlog is pushed.
	gone.Store(false)
	r := env.Do("POST", spath("t", "s", "/enable"), nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	require.Empty(t, r.Body)
	waitDrained(t, env, "t", "s")
	reqs := rc.requests()
	var later []string
	for _, h := range reqs[1:] {
		later = append(later, h.id())
	}
	require.ElementsMatch(t, []string{"evt-g1", "evt-g2"}, later)
	p, _ = subPush(t, env, "t", "s")
	require.Nil(t, p.DisabledAt)
	require.Nil(t, p.DisabledReason)
	require.Nil(t, p.FailingSince)

	// enable needs push, and the target.
	putSub(t, env, "t", "pull", nil, http.StatusCreated)
	requireProblem(t, env.Do("POST", spath("t", "pull", "/enable"), nil), http.StatusConflict, "conflict")
	requireProblem(t, env.Do("POST", spath("t", "ghost", "/enable"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("POST", qpath("ghost", "/enable"), nil), http.StatusNotFound, "not_found")
}

// TestPushRetryAfter: a 429's or 503's Retry-After sets the retry, capped
// at one hour.
func TestPushRetryAfter(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	soon := newReceiver(t, firstThen(func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	later := newReceiver(t, func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		w.Header().Set("Retry-After", "100000")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	// Without Retry-After these would retry at once.
	putPush(t, env, qpath("soon"), fast(map[string]any{"push": map[string]any{"url": soon.url()}}), http.StatusCreated, queueKeys)
	putPush(t, env, qpath("later"), fast(map[string]any{"push": map[string]any{"url": later.url()}}), http.StatusCreated, queueKeys)
	send(t, env, "soon", msg(1))
	send(t, env, "later", msg(2))

	reqs := soon.wait(t, 2)
	gap := reqs[1].at.Sub(reqs[0].at)
	require.GreaterOrEqual(t, gap, 900*time.Millisecond, "Retry-After: 1 honoured")
	require.Equal(t, reqs[0].id(), reqs[1].id())
	eventually(t, "soon drained", func() bool { return counts(t, env, "soon") == client.QueueStats{} })

	later.wait(t, 1)
	eventually(t, "later's message delayed", func() bool { return counts(t, env, "later") == client.QueueStats{Delayed: 1} })
	as := waitAttempts(t, env, qpath("later"), 1)
	require.Equal(t, http.StatusServiceUnavailable, statusOf(as[0]))
	// The delay is the cap: one hour, not 100000 s.
	conn := dbConn(t, env.DatabaseURL)
	var secs float64
	require.NoError(t, conn.QueryRow(context.Background(), `
		SELECT extract(epoch FROM m.visible_at - now())::float8 FROM ferry.messages m
		JOIN ferry.queues q ON q.id = m.queue_id WHERE q.name = 'later' AND q.topic_id IS NULL`).Scan(&secs))
	require.InDelta(t, 3600, secs, 60, "Retry-After capped at one hour")
	require.Equal(t, 1, later.count(), "not retried before the delay")
}

// TestPushRedirectIsFailure: a 3xx is a failed attempt; the redirect is
// not followed.
func TestPushRedirectIsFailure(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		if h.path == "/hook" {
			http.Redirect(w, r, "http://"+r.Host+"/other", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	pushOne(t, env, map[string]any{"max_receives": 1, "push": map[string]any{"url": rc.url()}}, "evt-302")

	dl := waitDeadLetters(t, env, func(n int) bool { return n > 0 })
	require.Contains(t, *dl.Messages[0].LastError, "redirect")
	as := waitAttempts(t, env, spath("t", "s"), 1)
	require.Len(t, as, 1)
	require.Equal(t, http.StatusFound, statusOf(as[0]))
	require.Contains(t, errorOf(as[0]), "redirect")
	for _, h := range rc.requests() {
		require.Equal(t, "/hook", h.path, "the redirect is never followed")
	}
	require.Equal(t, 1, rc.count())
}

// TestPushTimeouts: no answer, or a body that does not end, within
// timeout_seconds is a failure (not an ack); the retry delivers.
func TestPushTimeouts(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	hang := newReceiver(t, firstThen(func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		block(r, h, 3*time.Second)
		w.WriteHeader(http.StatusNoContent)
	}))
	slowBody := newReceiver(t, firstThen(func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"ok":`))
		w.(http.Flusher).Flush()
		block(r, h, 3*time.Second)
		_, _ = w.Write([]byte(`true}`))
	}))
	putTopic(t, env, "t", nil, http.StatusCreated)
	newPushSub(t, env, "t", "hang", fast(map[string]any{"push": map[string]any{"url": hang.url(), "timeout_seconds": 1}}))
	newPushSub(t, env, "t", "slow-body", fast(map[string]any{"push": map[string]any{"url": slowBody.url(), "timeout_seconds": 1}}))
	publishEvents(t, env, "t", evt("e", "id", "evt-t"))

	for _, sub := range []string{"hang", "slow-body"} {
		waitDrained(t, env, "t", sub)
		as := waitAttempts(t, env, spath("t", sub), 2)
		require.Len(t, as, 2, sub)
		first, second := as[1], as[0]
		require.Nil(t, first.StatusCode, "%s: no complete response in time: %+v", sub, first)
		require.Contains(t, errorOf(first), "timeout", sub)
		require.GreaterOrEqual(t, first.DurationMS, int64(900), sub)
		require.Less(t, first.DurationMS, int64(2900), "%s: cut at timeout_seconds", sub)
		require.Equal(t, http.StatusNoContent, statusOf(second), sub)
		require.Equal(t, 2, second.Attempt, sub)
	}
	require.Equal(t, 2, hang.count())
	require.Equal(t, 2, slowBody.count())
}

// TestPushConnectionReset: a connection closed without an answer is a
// failure without a status; the retry delivers.
func TestPushConnectionReset(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	rc := newReceiver(t, firstThen(func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0) // RST, not FIN
		}
		_ = conn.Close()
	}))
	pushOne(t, env, map[string]any{"push": map[string]any{"url": rc.url()}}, "evt-rst")

	waitDrained(t, env, "t", "s")
	as := waitAttempts(t, env, spath("t", "s"), 2)
	require.Len(t, as, 2)
	require.Nil(t, as[1].StatusCode, "no response: %+v", as[1])
	require.NotEmpty(t, errorOf(as[1]))
	require.NotContains(t, errorOf(as[1]), "timeout")
	require.Equal(t, http.StatusNoContent, statusOf(as[0]))
	reqs := rc.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, reqs[0].id(), reqs[1].id())
}

// TestPushMaxInFlight: never more than max_in_flight requests at once.
func TestPushMaxInFlight(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	var cur, peak atomic.Int32
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		select {
		case <-release:
		case <-h.done:
		case <-r.Context().Done():
		}
		cur.Add(-1)
		w.WriteHeader(http.StatusNoContent)
	})
	putTopic(t, env, "t", map[string]any{"partitions": 4}, http.StatusCreated)
	newPushSub(t, env, "t", "s", fast(map[string]any{"push": map[string]any{"url": rc.url(), "max_in_flight": 2}}))
	events := make([]map[string]any, 10)
	for i := range events {
		events[i] = evt("e", "id", fmt.Sprintf("evt-%d", i))
	}
	publishEvents(t, env, "t", events...)

	for i := range 10 {
		want := int32(min(2, 10-i))
		eventually(t, fmt.Sprintf("%d requests in flight (%d released)", want, i), func() bool { return cur.Load() == want })
		release <- struct{}{}
	}
	waitDrained(t, env, "t", "s")
	require.EqualValues(t, 2, peak.Load(), "max_in_flight 2: two at once, never more")
	var got []string
	for _, h := range rc.requests() {
		got = append(got, h.id())
	}
	var want []string
	for _, e := range events {
		want = append(want, e["id"].(string))
	}
	require.ElementsMatch(t, want, got, "each event pushed once")
}

// TestPushRateLimit: rate_limit_per_second spaces the requests.
func TestPushRateLimit(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	rc := newReceiver(t, nil)
	putTopic(t, env, "t", nil, http.StatusCreated)
	newPushSub(t, env, "t", "s", fast(map[string]any{"push": map[string]any{"url": rc.url(), "rate_limit_per_second": 5}}))
	events := make([]map[string]any, 15)
	for i := range events {
		events[i] = evt("e", "id", fmt.Sprintf("evt-%d", i))
	}
	publishEvents(t, env, "t", events...)

	reqs := rc.wait(t, 15)
	span := reqs[len(reqs)-1].at.Sub(reqs[0].at)
	// A second's worth at once, then 5 a second: the 15th after ~2 s.
	require.GreaterOrEqual(t, span, 1800*time.Millisecond, "15 requests at 5/s")
	waitDrained(t, env, "t", "s")
	require.Len(t, rc.requests(), 15)
}

// TestPushOrdered: an ordered subscription pushes the events of a key one
// at a time, in offset order; other keys go on meanwhile.
func TestPushOrdered(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	var (
		mu        sync.Mutex
		order     = map[string][]string{}
		inFlight  = map[string]int{}
		overlap   []string
		bArrived  = make(chan struct{})
		aWaitedB  atomic.Bool
		closeOnce sync.Once
	)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		var ev client.Event
		if err := json.Unmarshal(h.body, &ev); err != nil || ev.Key == nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		key := *ev.Key
		mu.Lock()
		order[key] = append(order[key], ev.ID)
		inFlight[key]++
		if inFlight[key] > 1 {
			overlap = append(overlap, ev.ID)
		}
		mu.Unlock()
		switch ev.ID {
		case "b1":
			closeOnce.Do(func() { close(bArrived) })
		case "a1":
			// Hold A's head until B's event arrives: keys are independent.
			select {
			case <-bArrived:
				aWaitedB.Store(true)
			case <-time.After(5 * time.Second):
			case <-h.done:
			}
		}
		mu.Lock()
		inFlight[key]--
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	putTopic(t, env, "t", map[string]any{"partitions": 2}, http.StatusCreated)
	newPushSub(t, env, "t", "s", fast(map[string]any{"ordered": true, "push": map[string]any{"url": rc.url()}}))
	publishEvents(t, env, "t",
		evt("e", "id", "a1", "key", "A"), evt("e", "id", "a2", "key", "A"),
		evt("e", "id", "a3", "key", "A"), evt("e", "id", "b1", "key", "B"))

	rc.wait(t, 4)
	waitDrained(t, env, "t", "s")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"a1", "a2", "a3"}, order["A"], "one key in offset order")
	require.Equal(t, []string{"b1"}, order["B"])
	require.Empty(t, overlap, "never two of one key in flight")
	require.True(t, aWaitedB.Load(), "B is pushed while A's head is in flight")
}

// TestPushSlowEndpointIsolation: one endpoint that hangs does not slow the
// others.
func TestPushSlowEndpointIsolation(t *testing.T) {
	t.Parallel()
	// The server's own default worker count: no PushWorkers option.
	env := ferrytest.Start(t, allowPrivatePush)
	slow := newReceiver(t, func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		block(r, h, time.Minute)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	healthy := newReceiver(t, nil)
	putTopic(t, env, "t", map[string]any{"partitions": 4}, http.StatusCreated)
	newPushSub(t, env, "t", "slow", fast(map[string]any{"push": map[string]any{"url": slow.url(), "timeout_seconds": 5}}))
	for i := range 9 {
		newPushSub(t, env, "t", fmt.Sprintf("ok-%d", i), fast(map[string]any{"push": map[string]any{
			"url": healthy.srv.URL + fmt.Sprintf("/ok-%d", i), "timeout_seconds": 5,
		}}))
	}
	events := make([]map[string]any, 20)
	for i := range events {
		events[i] = evt("e", "id", fmt.Sprintf("evt-%d", i))
	}
	start := time.Now()
	publishEvents(t, env, "t", events...)

	reqs := healthy.wait(t, 180)
	took := time.Since(start)
	require.Less(t, took, 5*time.Second, "healthy deliveries do not wait for the slow endpoint's timeouts")
	seen := map[string]bool{}
	for _, h := range reqs {
		seen[h.path+" "+h.id()] = true
	}
	require.Len(t, seen, 180, "every event to every healthy subscription")
	require.Positive(t, slow.count(), "the slow endpoint was tried meanwhile")
}

// TestPushSSRF: push URLs that point inside are refused at creation, and
// at dial time when they got into the database otherwise.
func TestPushSSRF(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t) // private push not allowed
	putTopic(t, env, "t", nil, http.StatusCreated)
	putSub(t, env, "t", "pull", nil, http.StatusCreated)
	putQueue(t, env, "pullq", nil)

	for _, u := range []string{
		"http://127.0.0.1:9/", "http://169.254.169.254/latest/meta-data", "http://localhost/",
		"http://[::1]/", "http://10.1.2.3/", "http://[fd00::1]/", "http://100.64.0.1/",
		"ftp://example.com/", "http://user:pw@93.184.215.14/", "not a url",
	} {
		for _, path := range []string{spath("t", "new"), qpath("newq"), spath("t", "pull"), qpath("pullq")} {
			r := env.Do("PUT", path, map[string]any{"push": map[string]any{"url": u}})
			p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
			errs, _ := p["errors"].([]any)
			require.Len(t, errs, 1, "PUT %s %s: %s", path, u, r.Body)
			require.Equal(t, "push.url", errs[0].(map[string]any)["field"], "PUT %s %s: %s", path, u, r.Body)
		}
		// Nothing written.
		requireProblem(t, env.Do("GET", spath("t", "new"), nil), http.StatusNotFound, "not_found")
		requireProblem(t, env.Do("GET", qpath("newq"), nil), http.StatusNotFound, "not_found")
		p, _ := subPush(t, env, "t", "pull")
		require.Nil(t, p, "%s: still pull", u)
		p, _ = getPush(t, env, qpath("pullq"), queueKeys)
		require.Nil(t, p, "%s: still pull", u)
	}
	// A public address is fine (nothing is sent: no messages).
	p, secret := putPush(t, env, qpath("public"), map[string]any{"push": map[string]any{"url": "http://93.184.215.14/hook"}}, http.StatusCreated, queueKeys)
	require.Equal(t, "http://93.184.215.14/hook", p.URL)
	require.NotEmpty(t, secret)

	// At dial time: a private URL in the database (an old row, or a name
	// that resolves elsewhere now) is never connected to.
	rc := newReceiver(t, nil)
	putQueue(t, env, "rebound", map[string]any{"max_receives": 1})
	conn := dbConn(t, env.DatabaseURL)
	tag, err := conn.Exec(context.Background(),
		`UPDATE ferry.queues SET push_url = $1, signing_secret = $2 WHERE name = 'rebound' AND topic_id IS NULL`,
		rc.url(), push.NewSigningSecret())
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	send(t, env, "rebound", msg("x"))

	as := waitAttempts(t, env, qpath("rebound"), 1)
	require.Nil(t, as[0].StatusCode)
	require.Contains(t, errorOf(as[0]), "forbidden")
	eventually(t, "the dead letter", func() bool { return counts(t, env, "rebound").DeadLetters == 1 })
	require.Zero(t, rc.count(), "the private address is never connected to")
}

// TestPushRotateSecret: after a rotation, pushes carry the new and the
// previous signature.
func TestPushRotateSecret(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	rc := newReceiver(t, nil)
	putTopic(t, env, "t", nil, http.StatusCreated)
	old := newPushSub(t, env, "t", "s", fast(map[string]any{"push": map[string]any{"url": rc.url()}}))
	// A first push, before the rotation: one signature.
	publishEvents(t, env, "t", evt("e", "id", "evt-before"))
	h := rc.wait(t, 1)[0]
	require.Len(t, strings.Fields(h.header.Get("webhook-signature")), 1)
	require.NoError(t, push.Verify(old, h.header, h.body, time.Now(), 0))
	waitDrained(t, env, "t", "s")

	r := env.Do("POST", spath("t", "s", "/rotate-secret"), nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	m := r.Map(t)
	requireKeys(t, m, []string{"signing_secret", "previous_secret_expires"}, "rotate answer")
	var rot struct {
		Secret  string    `json:"signing_secret"`
		Expires time.Time `json:"previous_secret_expires"`
	}
	r.JSON(t, &rot)
	requireSecret(t, rot.Secret)
	require.NotEqual(t, old, rot.Secret)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), rot.Expires, time.Minute)
	// GET still does not show a secret.
	subPush(t, env, "t", "s")

	// The next push carries both signatures.
	publishEvents(t, env, "t", evt("e", "id", "evt-rot"))
	h = rc.wait(t, 2)[1]
	require.Equal(t, "evt-rot", h.id())
	sigs := strings.Fields(h.header.Get("webhook-signature"))
	require.Len(t, sigs, 2, "two signatures during the overlap: %q", h.header.Get("webhook-signature"))
	for _, s := range sigs {
		require.True(t, strings.HasPrefix(s, "v1,"), s)
	}
	require.NoError(t, push.Verify(rot.Secret, h.header, h.body, time.Now(), 0), "the new secret")
	require.NoError(t, push.Verify(old, h.header, h.body, time.Now(), 0), "the previous secret")
	newFirst := h.header.Clone()
	newFirst.Set("webhook-signature", sigs[0])
	require.NoError(t, push.Verify(rot.Secret, newFirst, h.body, time.Now(), 0), "the new secret's signature first")

	// Queues rotate too; a pull target has no secret to rotate.
	_, qold := putPush(t, env, qpath("q"), map[string]any{"push": map[string]any{"url": rc.url()}}, http.StatusCreated, queueKeys)
	r = env.Do("POST", qpath("q", "/rotate-secret"), nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.NotEqual(t, qold, r.Map(t)["signing_secret"])
	putSub(t, env, "t", "pull", nil, http.StatusCreated)
	putQueue(t, env, "pullq", nil)
	requireProblem(t, env.Do("POST", spath("t", "pull", "/rotate-secret"), nil), http.StatusConflict, "conflict")
	requireProblem(t, env.Do("POST", qpath("pullq", "/rotate-secret"), nil), http.StatusConflict, "conflict")
	requireProblem(t, env.Do("POST", spath("t", "ghost", "/rotate-secret"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("POST", qpath("ghost", "/rotate-secret"), nil), http.StatusNotFound, "not_found")
}

// TestPushAcrossRestart: a server stopped in the middle of retries; the
// next one on the same database finishes the delivery.
func TestPushAcrossRestart(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	rc := newReceiver(t, failFirst(2, http.StatusInternalServerError))
	putTopic(t, env, "t", nil, http.StatusCreated)
	secret := newPushSub(t, env, "t", "s", map[string]any{
		"retry_min_seconds": 1, "retry_max_seconds": 1, "push": map[string]any{"url": rc.url()},
	})
	publishEvents(t, env, "t", evt("e", "id", "evt-restart"))
	waitAttempts(t, env, spath("t", "s"), 1)
	env.Stop()

	env2 := ferrytest.StartOn(t, env.DatabaseURL, allowPrivatePush)
	waitDrained(t, env2, "t", "s")
	reqs := rc.requests()
	require.GreaterOrEqual(t, len(reqs), 3, "two failures, then the success")
	for _, h := range reqs {
		require.Equal(t, "evt-restart", h.id())
		require.NoError(t, push.Verify(secret, h.header, h.body, time.Now(), 0))
	}
	require.Empty(t, subDeadLetters(t, env2, "t", "s", "").Messages)
	as := waitAttempts(t, env2, spath("t", "s"), 3)
	require.Equal(t, http.StatusNoContent, statusOf(as[0]))
}

// TestPushMetrics: attempts by outcome, and the delivery latency.
func TestPushMetrics(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	rc := newReceiver(t, failFirst(1, http.StatusBadGateway))
	pushOne(t, env, map[string]any{"push": map[string]any{"url": rc.url()}}, "evt-m")
	waitDrained(t, env, "t", "s")
	waitAttempts(t, env, spath("t", "s"), 2)

	m, _ := metrics(t, env)
	require.Equal(t, 1.0, m[`ferry_push_attempts_total{outcome="ok"}`])
	require.Equal(t, 1.0, m[`ferry_push_attempts_total{outcome="failed"}`])
	require.Equal(t, 1.0, m[`ferry_push_delivery_latency_seconds_count`])
	require.Contains(t, m, `ferry_push_delivery_latency_seconds_bucket{le="+Inf"}`)
}

// TestPushConfig: the push member of PUT: defaults, partial changes,
// removal, and what is refused; the attempts query.
func TestPushConfig(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	putTopic(t, env, "t", nil, http.StatusCreated)
	const u1, u2 = "http://127.0.0.1:9/one", "http://127.0.0.1:9/two"

	for _, tc := range []struct {
		path string
		keys []string
	}{{spath("t", "s"), subscriptionKeys}, {qpath("q"), queueKeys}} {
		// Created pull; push added later issues the secret then.
		p, secret := putPush(t, env, tc.path, nil, http.StatusCreated, tc.keys)
		require.Nil(t, p)
		require.Empty(t, secret)
		p, secret = putPush(t, env, tc.path, map[string]any{"push": map[string]any{"url": u1, "max_in_flight": 4}}, http.StatusOK, tc.keys)
		require.NotEmpty(t, secret, "push added: the secret is issued")
		require.Equal(t, &client.Push{URL: u1, TimeoutSeconds: 10, MaxInFlight: 4, Format: "standard"}, p)

		// Only the fields given change; the secret is not shown again.
		p, again := putPush(t, env, tc.path, map[string]any{"push": map[string]any{"timeout_seconds": 3, "rate_limit_per_second": 7}}, http.StatusOK, tc.keys)
		require.Empty(t, again)
		require.Equal(t, &client.Push{URL: u1, TimeoutSeconds: 3, MaxInFlight: 4, RateLimitPerSecond: 7, Format: "standard"}, p)
		p, _ = putPush(t, env, tc.path, map[string]any{"max_receives": 3}, http.StatusOK, tc.keys)
		require.Equal(t, &client.Push{URL: u1, TimeoutSeconds: 3, MaxInFlight: 4, RateLimitPerSecond: 7, Format: "standard"}, p, "push absent: unchanged")
		p, _ = putPush(t, env, tc.path, map[string]any{"push": map[string]any{"url": u2}}, http.StatusOK, tc.keys)
		require.Equal(t, &client.Push{URL: u2, TimeoutSeconds: 3, MaxInFlight: 4, RateLimitPerSecond: 7, Format: "standard"}, p)
		got, _ := getPush(t, env, tc.path, tc.keys)
		require.Equal(t, p, got)

		// Refused, and nothing changed.
		for _, bad := range []struct {
			push  any
			field string
		}{
			{map[string]any{"url": u1, "timeout_seconds": 0}, "push.timeout_seconds"},
			{map[string]any{"url": u1, "timeout_seconds": 61}, "push.timeout_seconds"},
			{map[string]any{"max_in_flight": 0}, "push.max_in_flight"},
			{map[string]any{"max_in_flight": 1001}, "push.max_in_flight"},
			{map[string]any{"rate_limit_per_second": -1}, "push.rate_limit_per_second"},
			{map[string]any{"rate_limit_per_second": 10001}, "push.rate_limit_per_second"},
			{map[string]any{"url": "https://example.com/" + strings.Repeat("p", 2048)}, "push.url"},
			{map[string]any{"url": "ftp://example.com/"}, "push.url"},
			{map[string]any{"url": u1, "secret": "whsec_x"}, "push.secret"},
			{"http://127.0.0.1:9/", "push"},
		} {
			r := env.Do("PUT", tc.path, map[string]any{"push": bad.push})
			p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
			errs, _ := p["errors"].([]any)
			require.NotEmpty(t, errs, "%v: %s", bad.push, r.Body)
			require.Equal(t, bad.field, errs[0].(map[string]any)["field"], "%v: %s", bad.push, r.Body)
		}
		after, _ := getPush(t, env, tc.path, tc.keys)
		require.Equal(t, got, after, "a refused PUT changes nothing")

		// null removes push; added again, a new secret is issued.
		p, _ = putPush(t, env, tc.path, map[string]any{"push": nil}, http.StatusOK, tc.keys)
		require.Nil(t, p)
		got, _ = getPush(t, env, tc.path, tc.keys)
		require.Nil(t, got)
		requireProblem(t, env.Do("POST", tc.path+"/rotate-secret", nil), http.StatusConflict, "conflict")
		// Without push, url is required.
		r := env.Do("PUT", tc.path, map[string]any{"push": map[string]any{"timeout_seconds": 5}})
		p2 := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
		require.Contains(t, fmt.Sprint(p2["errors"]), "push.url", "%s", r.Body)
		_, secret2 := putPush(t, env, tc.path, map[string]any{"push": map[string]any{"url": u1}}, http.StatusOK, tc.keys)
		require.NotEmpty(t, secret2)
		require.NotEqual(t, secret, secret2, "removing push forgets the secret")

		// The attempts query.
		require.Empty(t, attempts(t, env, tc.path, "?status=failed&limit=1000"))
		for _, q := range []string{"?status=ok", "?limit=0", "?limit=1001", "?limit=x", "?after=1"} {
			requireProblem(t, env.Do("GET", tc.path+"/attempts"+q, nil), http.StatusBadRequest, "invalid_request")
		}
	}
	// New targets: url required with push.
	r := env.Do("PUT", spath("t", "nourl"), map[string]any{"push": map[string]any{"timeout_seconds": 5}})
	requireProblem(t, r, http.StatusBadRequest, "invalid_request")
	requireProblem(t, env.Do("GET", spath("t", "nourl"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("GET", spath("t", "ghost", "/attempts"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("GET", qpath("ghost", "/attempts"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("GET", spath("ghost", "s", "/attempts"), nil), http.StatusNotFound, "not_found")
}

// TestPushDisabledAfterFailingTooLong: a target whose every attempt fails
// for the configured period is disabled, with a reason; a new url enables
// it again.
func TestPushDisabledAfterFailingTooLong(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush, func(c *server.Config) { c.PushDisableAfter = time.Second })
	var healthy atomic.Bool
	rc := newReceiver(t, failWhile(func() bool { return !healthy.Load() }, http.StatusInternalServerError))
	putTopic(t, env, "t", nil, http.StatusCreated)
	newPushSub(t, env, "t", "s", map[string]any{
		"max_receives": 1000, "retry_min_seconds": 1, "retry_max_seconds": 1, "push": map[string]any{"url": rc.url()},
	})
	publishEvents(t, env, "t", evt("e", "id", "evt-f"))

	var p *client.Push
	eventually(t, "push disabled", func() bool {
		p, _ = subPush(t, env, "t", "s")
		return p.DisabledAt != nil
	})
	require.NotNil(t, p.FailingSince)
	require.GreaterOrEqual(t, p.DisabledAt.Sub(*p.FailingSince), time.Second, "disabled after failing for PushDisableAfter")
	require.NotNil(t, p.DisabledReason)
	require.Contains(t, *p.DisabledReason, "failed")
	require.GreaterOrEqual(t, rc.count(), 2)
	st := subCounts(t, env, "t", "s")
	require.Equal(t, client.QueueStats{Available: st.Available, Delayed: st.Delayed}, st, "the event waits; it is not dead-lettered")
	require.EqualValues(t, 1, st.Available+st.Delayed)

	// A PUT that changes the url clears the failure and disabled state.
	healthy.Store(true)
	p, _ = putPush(t, env, spath("t", "s"), map[string]any{"push": map[string]any{"url": rc.url() + "?v=2"}}, http.StatusOK, subscriptionKeys)
	require.Nil(t, p.DisabledAt)
	require.Nil(t, p.DisabledReason)
	require.Nil(t, p.FailingSince)
	waitDrained(t, env, "t", "s")
	require.Equal(t, "evt-f", rc.requests()[rc.count()-1].id())
}

// TestPushLastErrorPerMessage: each message's dead letter carries its own
// attempt's error, also when several fail in one round.
func TestPushLastErrorPerMessage(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	const n = 10
	var arrived sync.WaitGroup
	arrived.Add(n)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		if h.n <= n {
			// All requests in flight, then all answers at once.
			arrived.Done()
			arrived.Wait()
		}
		var code int
		_, _ = fmt.Sscanf(h.id(), "evt-%d", &code)
		w.WriteHeader(code) // 500 to 509: one status per event
	})
	putTopic(t, env, "t", map[string]any{"partitions": 4}, http.StatusCreated)
	newPushSub(t, env, "t", "s", fast(map[string]any{"max_receives": 1, "push": map[string]any{"url": rc.url(), "max_in_flight": n}}))
	events := make([]map[string]any, n)
	for i := range events {
		events[i] = evt("e", "id", fmt.Sprintf("evt-%d", 500+i))
	}
	publishEvents(t, env, "t", events...)

	dl := waitDeadLetters(t, env, func(got int) bool { return got == n })
	as := waitAttempts(t, env, spath("t", "s"), n)
	for _, a := range as {
		require.Equal(t, strings.TrimPrefix(a.MessageID, "evt-"), fmt.Sprint(statusOf(a)), "attempts are right")
	}
	for _, d := range dl.Messages {
		require.NotNil(t, d.LastError)
		require.Equal(t, "HTTP "+strings.TrimPrefix(d.ID, "evt-"), *d.LastError, "%s: its own error as last_error", d.ID)
	}
}

// cpuTime is the CPU time (user + system) this process has used so far.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestPushWorkerDoesNotSpinWhileStopping: once the server's Stop channel is
// closed, a push worker with a request in flight loops without blocking
// (its select has a case on the closed Stop channel) until the request
// ends. Compare the process's CPU use over the same window with a request
// in flight before and after shutdown began.
func TestPushWorkerDoesNotSpinWhileStopping(t *testing.T) {
	env := ferrytest.Start(t, allowPrivatePush)
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, h hookRequest) {
		select {
		case <-release:
		case <-h.done:
		case <-time.After(20 * time.Second):
		}
		w.WriteHeader(http.StatusNoContent)
	})
	putPush(t, env, qpath("jobs"), map[string]any{"push": map[string]any{
		"url": rc.url(), "timeout_seconds": 30,
	}}, http.StatusCreated, queueKeys)
	send(t, env, "jobs", msg(map[string]any{"n": 1}))
	rc.wait(t, 1) // the request is in flight, held by the receiver

	const window = 2 * time.Second
	before := cpuTime(t)
	time.Sleep(window)
	idle := cpuTime(t) - before

	stopped := make(chan struct{})
	go func() { env.Stop(); close(stopped) }()
	time.Sleep(100 * time.Millisecond) // Stop closed, shutdown waiting for the push job
	before = cpuTime(t)
	time.Sleep(window)
	stopping := cpuTime(t) - before
	close(release)
	<-stopped

	t.Logf("CPU over %s with a push in flight: %s before shutdown, %s while stopping", window, idle, stopping)
	require.Less(t, stopping, window/4, "the push worker busy-loops while it waits for its in-flight request during shutdown")
}
