// Package ferrytest boots real Ferry servers for end-to-end tests: a fresh
// database cloned from the migrated template, the real server on a free
// loopback port, and an HTTP client that checks every response it receives
// against openapi/openapi.yaml.
//
// A package using it needs the usual TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
package ferrytest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// AdminKey is the key every test server accepts.
const AdminKey = "test-admin-key-0123456789"

// Env is one running server and a client for it.
type Env struct {
	T           testing.TB
	URL         string
	DatabaseURL string
	Server      *server.Server
	// Client validates every response against the OpenAPI spec.
	Client *http.Client
	Config server.Config

	stopFn func()
}

// Option changes a test server's configuration before it starts.
type Option func(*server.Config)

// Start boots a server on a new database; it is shut down at cleanup.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	return StartOn(t, pgtest.NewDatabase(t), opts...)
}

// StartOn boots a server on an existing database (e.g. a second instance,
// or a restart).
func StartOn(t testing.TB, databaseURL string, opts ...Option) *Env {
	t.Helper()
	level := slog.LevelWarn
	if os.Getenv("FERRY_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return start(t, databaseURL, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})), opts...)
}

// StartLogging boots a server on a new database whose log, every level
// of it (debug included), is written to w, for tests that read the log. w
// is written from the server's goroutines.
func StartLogging(t testing.TB, w io.Writer, opts ...Option) *Env {
	t.Helper()
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return start(t, pgtest.NewDatabase(t), log, opts...)
}

func start(t testing.TB, databaseURL string, log *slog.Logger, opts ...Option) *Env {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.DatabaseURL, cfg.Listen, cfg.AdminKey = databaseURL, "127.0.0.1:0", AdminKey
	cfg.ShutdownTimeout, cfg.DBMaxConns, cfg.SendWorkers = 10*time.Second, 10, 2
	cfg.NotifyWindow, cfg.LogLevel = 5*time.Millisecond, "warn"
	// Tests read fresh gauges on every scrape and bound a request's body
	// only where they test that bound.
	cfg.MetricsInterval, cfg.BodyReadTimeout = 0, 0
	for _, o := range opts {
		o(&cfg)
	}
	s, err := server.New(context.Background(), cfg, log)
	require.NoError(t, err)
	s.Start()
	env := &Env{
		T:           t,
		URL:         s.URL(),
		DatabaseURL: databaseURL,
		Server:      s,
		Client:      openapitest.New(t).Client(t, nil),
		Config:      cfg,
	}
	stopped := false
	env.stopFn = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}
	t.Cleanup(env.Stop)
	return env
}

// Stop shuts the server down (gracefully); later calls do nothing.
func (e *Env) Stop() { e.stopFn() }

// Response is a decoded response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v (failing the test on error) and returns v.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.Body, v), "body: %s", r.Body)
}

// Map decodes the body as a JSON object.
func (r Response) Map(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// Do sends a request with the admin key; body is marshalled to JSON unless
// it is a []byte or string (sent as is) or nil.
func (e *Env) Do(method, path string, body any) Response {
	e.T.Helper()
	return e.DoWith(method, path, body, http.Header{"Authorization": {"Bearer " + AdminKey}})
}

// DoWith sends a request with exactly the given headers (plus
// Content-Type: application/json when there is a body and none is given).
func (e *Env) DoWith(method, path string, body any, header http.Header) Response {
	e.T.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	case string:
		r = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		require.NoError(e.T, err)
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.URL+path, r)
	require.NoError(e.T, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.Client.Do(req)
	require.NoError(e.T, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.T, err)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}
