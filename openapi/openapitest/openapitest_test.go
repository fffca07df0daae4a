package openapitest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/openapi"
)

// recorder is a testing.TB that records failures instead of failing, so a
// test can observe what the Validator reports. Methods it does not override
// go to the real test.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.TB.FailNow()
}

func (r *recorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

const queueJSON = `{
	"name": "q1",
	"visibility_timeout_seconds": 30, "max_receives": 5, "retention_seconds": 345600,
	"delay_seconds": 0, "dedup_window_seconds": 300, "max_depth": 0,
	"retry_min_seconds": 1, "retry_max_seconds": 300, "push": null,
	"dead_letter_queue": null, "dead_letter_sources": [],
	"receive_wait_seconds": 0, "max_message_size": 0, "content_based_dedup": false, "tags": {},
	"created_at": "2025-06-01T10:00:00Z", "updated_at": "2025-06-01T10:00:00.123456Z",
	"stats": {"available": 3, "in_flight": 1, "delayed": 0, "dead_letters": 2, "oldest_age_seconds": 12}
}`

const problemJSON = `{"type": "about:blank", "title": "Not Found", "status": 404, "detail": "queue q1 does not exist", "code": "not_found", "request_id": "r-1"}`

func jsonHeader() http.Header { return http.Header{"Content-Type": {"application/json"}} }

func problemHeader() http.Header {
	return http.Header{"Content-Type": {"application/problem+json"}}
}

func TestCheck(t *testing.T) {
	t.Parallel()

	v := New(t)
	withRetryAfter := problemHeader()
	withRetryAfter.Set("Retry-After", "5")
	badRetryAfter := problemHeader()
	badRetryAfter.Set("Retry-After", "soon")
	full := `{"type": "about:blank", "title": "Queue full", "status": 429, "detail": "q1 is at max_depth", "code": "queue_full"}`

	tests := []struct {
		name    string
		method  string
		url     string
		status  int
		header  http.Header
		body    string
		wantErr string // "" when the response is valid
	}{
		{"queue", "GET", "/v1/queues/q1", 200, jsonHeader(), queueJSON, ""},
		{"queue with charset", "GET", "/v1/queues/q1", 200, http.Header{"Content-Type": {"application/json; charset=UTF-8"}}, queueJSON, ""},
		{"created queue", "PUT", "http://127.0.0.1:41234/v1/queues/q1", 201, jsonHeader(), queueJSON, ""},
		{"queue list", "GET", "/v1/queues", 200, jsonHeader(), `{"queues": [` + queueJSON + `], "next": "cXVldWVzOnEx"}`, ""},
		{"empty queue list", "GET", "/v1/queues", 200, jsonHeader(), `{"queues": [], "next": null}`, ""},
		{"queue list without next", "GET", "/v1/queues", 200, jsonHeader(), `{"queues": []}`, `property "next" is missing`},
		{"not found", "GET", "/v1/queues/q1", 404, problemHeader(), problemJSON, ""},
		{"deleted", "DELETE", "/v1/queues/q1", 204, http.Header{}, "", ""},
		{"sent", "POST", "/v1/queues/q1/messages", 201, jsonHeader(), `{"messages": [{"id": "1", "duplicate": false}]}`, ""},
		{"queue full", "POST", "/v1/queues/q1/messages", 429, withRetryAfter, full, ""},
		{"received", "POST", "/v1/queues/q1/receive", 200, jsonHeader(), `{"messages": [{"id": "1", "body": [1, "x"], "attributes": {"k": "v"}, "group": null, "dedup_id": "d", "receipt": "r", "receive_count": 2, "sent_at": "2025-06-01T10:00:00+02:00"}]}`, ""},
		{"acked", "POST", "/v1/queues/q1/ack", 200, jsonHeader(), `{"results": [{"receipt": "r", "status": "stale"}]}`, ""},
		{"dead letters", "GET", "/v1/queues/q1/dead-letters?limit=10&after=abc", 200, jsonHeader(), `{"messages": [], "next": null}`, ""},
		{"redriven", "POST", "/v1/queues/q1/dead-letters/redrive", 200, jsonHeader(), `{"redriven": 0}`, ""},
		{"healthz", "GET", "/healthz", 200, jsonHeader(), `{"status": "ok"}`, ""},
		{"readyz down", "GET", "/readyz", 503, problemHeader(), `{"type": "about:blank", "title": "Unavailable", "status": 503, "detail": "database unreachable", "code": "unavailable"}`, ""},
		{"metrics", "GET", "/metrics", 200, http.Header{"Content-Type": {"text/plain; version=0.0.4; charset=utf-8"}}, "ferry_up 1\n", ""},
		{"spec", "GET", "/openapi.yaml", 200, http.Header{"Content-Type": {"application/yaml"}}, string(openapi.Spec()), ""},
		{"undeclared status falls to default problem", "GET", "/v1/queues/q1", 500, problemHeader(), `{"type": "about:blank", "title": "Internal", "status": 500, "detail": "internal error", "code": "internal"}`, ""},

		{"missing field", "GET", "/v1/queues/q1", 200, jsonHeader(), strings.Replace(queueJSON, `"max_receives": 5,`, "", 1), "max_receives"},
		{"wrong type", "GET", "/v1/queues/q1", 200, jsonHeader(), strings.Replace(queueJSON, `"max_receives": 5`, `"max_receives": "5"`, 1), "max_receives"},
		{"extra field", "GET", "/v1/queues/q1", 200, jsonHeader(), strings.Replace(queueJSON, `"name": "q1",`, `"name": "q1", "owner": null,`, 1), "owner"},
		{"bad time", "GET", "/v1/queues/q1", 200, jsonHeader(), strings.Replace(queueJSON, `"2025-06-01T10:00:00Z"`, `"yesterday"`, 1), "created_at"},
		{"push of the wrong shape", "GET", "/v1/queues/q1", 200, jsonHeader(), strings.Replace(queueJSON, `"push": null`, `"push": {"url": 5}`, 1), "push"},
		{"push not an object", "GET", "/v1/queues/q1", 200, jsonHeader(), strings.Replace(queueJSON, `"push": null`, `"push": "https://example.com"`, 1), "push"},
		{"negative stat", "GET", "/v1/queues/q1", 200, jsonHeader(), strings.Replace(queueJSON, `"available": 3`, `"available": -1`, 1), "available"},
		{"not JSON", "GET", "/v1/queues/q1", 200, jsonHeader(), `{"name":`, "decode"},
		{"wrong content type", "GET", "/v1/queues/q1", 200, http.Header{"Content-Type": {"text/html"}}, queueJSON, "text/html"},
		{"problem as application/json", "GET", "/v1/queues/q1", 404, jsonHeader(), problemJSON, "application/json"},
		{"problem without code", "GET", "/v1/queues/q1", 404, problemHeader(), strings.Replace(problemJSON, `, "code": "not_found"`, "", 1), "code"},
		{"problem status differs", "GET", "/v1/queues/q1", 400, problemHeader(), problemJSON, "status member is 404"},
		{"success with default status", "DELETE", "/v1/queues/q1", 200, jsonHeader(), `{}`, "status 200 is not declared"},
		{"body on 204", "DELETE", "/v1/queues/q1", 204, jsonHeader(), `{}`, "declares no body"},
		{"429 without Retry-After", "POST", "/v1/queues/q1/messages", 429, problemHeader(), full, "Retry-After"},
		{"429 with bad Retry-After", "POST", "/v1/queues/q1/messages", 429, badRetryAfter, full, "Retry-After"},
		{"stale is not ok", "POST", "/v1/queues/q1/nack", 200, jsonHeader(), `{"results": [{"receipt": "r", "status": "expired"}]}`, "status"},
		{"next missing", "GET", "/v1/queues/q1/dead-letters", 200, jsonHeader(), `{"messages": []}`, "next"},
		{"unknown path", "GET", "/v1/nope", 404, problemHeader(), problemJSON, "no operation"},
		{"unknown method", "PATCH", "/v1/queues/q1", 405, problemHeader(), problemJSON, "no operation"},
		{"empty name", "GET", "/v1/queues/", 404, problemHeader(), problemJSON, "no operation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			req := httptest.NewRequest(tt.method, tt.url, nil)
			rec := &recorder{TB: t}
			v.Check(rec, req, tt.status, tt.header, []byte(tt.body))
			errs := rec.errors()
			if tt.wantErr == "" {
				require.Empty(t, errs)
				return
			}
			require.Len(t, errs, 1)
			require.Contains(t, errs[0], tt.wantErr)
			// The report names the request and the status.
			require.Contains(t, errs[0], tt.method+" "+req.URL.Path)
			require.Contains(t, errs[0], fmt.Sprint(tt.status))
		})
	}
}

// TestUndeclaredStatus covers an operation without a default response: a
// status it does not declare is a mismatch. (Every operation of Ferry's spec
// has a default, so this uses a small spec of its own.)
func TestUndeclaredStatus(t *testing.T) {
	t.Parallel()

	const spec = `
openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /things/{id}:
    get:
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {type: object, required: [id], properties: {id: {type: string}}}
components:
  schemas:
    Problem: {type: object}
`
	doc, err := openapi3.NewLoader().LoadFromData([]byte(spec))
	require.NoError(t, err)
	v, err := newValidator(doc)
	require.NoError(t, err)

	req := httptest.NewRequest("GET", "http://example.com:8080/things/1", nil)
	rec := &recorder{TB: t}
	v.Check(rec, req, 200, jsonHeader(), []byte(`{"id": "1"}`))
	require.Empty(t, rec.errors())

	v.Check(rec, req, 404, jsonHeader(), []byte(`{"id": "1"}`))
	errs := rec.errors()
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "status is not supported")
	require.Contains(t, errs[0], "GET /things/1 → 404")
}

func TestCheckProblem(t *testing.T) {
	t.Parallel()

	v := New(t)
	rec := &recorder{TB: t}
	v.CheckProblem(rec, 404, problemHeader(), []byte(problemJSON))
	require.Empty(t, rec.errors())

	v.CheckProblem(rec, 405, problemHeader(), []byte(problemJSON))
	v.CheckProblem(rec, 404, jsonHeader(), []byte(problemJSON))
	v.CheckProblem(rec, 404, problemHeader(), []byte(`{"status": 404}`))
	v.CheckProblem(rec, 404, problemHeader(), []byte(`not json`))
	errs := rec.errors()
	require.Len(t, errs, 4)
	require.Contains(t, errs[0], "status member is 404")
	require.Contains(t, errs[1], "Content-Type")
	require.Contains(t, errs[2], "title")
	require.Contains(t, errs[3], "not JSON")
}

// TestClient drives a real server on a loopback port through the checking
// client: valid responses pass untouched, invalid ones are reported, and the
// caller still reads every body.
func TestClient(t *testing.T) {
	t.Parallel()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/queues/good", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, strings.Replace(queueJSON, `"q1"`, `"good"`, 1))
	})
	mux.HandleFunc("GET /v1/queues/bad", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"name": "bad"}`)
	})
	mux.HandleFunc("DELETE /v1/queues/{queue}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	v := New(t)
	rec := &recorder{TB: t}
	client := v.Client(rec, nil)

	get := func(path string) string {
		resp, err := client.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body)
	}

	require.Contains(t, get("/v1/queues/good"), `"good"`)
	require.Empty(t, rec.errors())

	req, err := http.NewRequest("DELETE", srv.URL+"/v1/queues/good", nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Empty(t, rec.errors())

	require.Equal(t, `{"name": "bad"}`, get("/v1/queues/bad"))
	errs := rec.errors()
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "GET /v1/queues/bad → 200")

	// A transport error passes through and checks nothing.
	dead := httptest.NewServer(mux)
	dead.Close()
	_, err = client.Get(dead.URL + "/v1/queues/good")
	require.Error(t, err)
	require.Len(t, rec.errors(), 1)
}

// TestConcurrent checks from many goroutines at once (run with -race).
func TestConcurrent(t *testing.T) {
	t.Parallel()

	v := New(t)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			rec := &recorder{TB: t}
			for range 20 {
				req := httptest.NewRequest("GET", fmt.Sprintf("/v1/queues/q%d", i), nil)
				v.Check(rec, req, 200, jsonHeader(), []byte(queueJSON))
				v.Check(rec, req, 404, problemHeader(), []byte(problemJSON))
			}
			if errs := rec.errors(); len(errs) > 0 {
				t.Errorf("unexpected: %v", errs)
			}
		})
	}
	wg.Wait()
}
