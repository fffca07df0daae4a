package client_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// recorder counts the requests a client sends and the statuses it gets,
// by "METHOD /path" (the queue's name replaced by the last segment only).
type recorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	seen []string // "POST ack 200"
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	status := "neterr"
	if err == nil {
		status = http.StatusText(resp.StatusCode)
	}
	parts := strings.Split(req.URL.Path, "/")
	r.mu.Lock()
	r.seen = append(r.seen, req.Method+" "+parts[len(parts)-1]+" "+status)
	r.mu.Unlock()
	return resp, err
}

// count is how many requests matched "METHOD last-segment status".
func (r *recorder) count(what string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.seen {
		if s == what {
			n++
		}
	}
	return n
}

// setup starts a Ferry and returns a client whose every request and
// answer is checked against the spec, with short backoffs, and the
// recorder of its traffic. baseURL, when given, replaces the server's (a
// proxy in front of it).
func setup(t *testing.T, baseURL ...string) (*ferrytest.Env, *client.Client, *recorder) {
	t.Helper()
	env := ferrytest.Start(t)
	u := env.URL
	if len(baseURL) > 0 {
		u = baseURL[0]
	}
	c, rec := newClient(t, u)
	return env, c, rec
}

func newClient(t *testing.T, u string) (*client.Client, *recorder) {
	rec := &recorder{base: http.DefaultTransport}
	h := openapitest.New(t).RequestClient(t, rec)
	return client.New(u, ferrytest.AdminKey, client.WithHTTPClient(h), client.WithBackoff(10*time.Millisecond, 200*time.Millisecond)), rec
}

// unavailableProxy forwards to target, but answers the first n requests
// that match (method and last path segment) with a 503 problem, the first
// of them with Retry-After: 1; or, when drop is set, closes their
// connection without an answer (a network error).
type unavailableProxy struct {
	*httptest.Server
	served atomic.Int64
}

func newUnavailableProxy(t *testing.T, target, method, segment string, n int64, drop ...bool) *unavailableProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	fwd := httputil.NewSingleHostReverseProxy(u)
	p := &unavailableProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == method && strings.HasSuffix(r.URL.Path, "/"+segment) {
			if k := p.served.Add(1); k <= n {
				if len(drop) > 0 && drop[0] {
					conn, _, err := http.NewResponseController(w).Hijack()
					require.NoError(t, err)
					_ = conn.Close()
					return
				}
				if k == 1 {
					w.Header().Set("Retry-After", "1")
				}
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"try later","code":"unavailable"}`))
				return
			}
		}
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// stats returns the queue's stats.
func stats(t *testing.T, c *client.Client, queue string) client.QueueStats {
	t.Helper()
	q, err := c.GetQueue(context.Background(), queue)
	require.NoError(t, err)
	return q.Stats
}

// burstProxy forwards to target, but answers the requests that match
// (method and last path segment) with the given statuses first, one each,
// as problems (the first with Retry-After: 1).
type burstProxy struct {
	*httptest.Server
	served atomic.Int64
}

func newBurstProxy(t *testing.T, target, method, segment string, statuses ...int) *burstProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	fwd := httputil.NewSingleHostReverseProxy(u)
	p := &burstProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == method && strings.HasSuffix(r.URL.Path, "/"+segment) {
			if k := p.served.Add(1); int(k) <= len(statuses) {
				if k == 1 {
					w.Header().Set("Retry-After", "1")
				}
				status := statuses[k-1]
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(status)
				_, _ = fmt.Fprintf(w, `{"type":"about:blank","title":%q,"status":%d,"detail":"burst","code":"burst_%d"}`, http.StatusText(status), status, status)
				return
			}
		}
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// switchProxy forwards every request to its current target, which a test
// changes when it restarts the Ferry behind it (a new port).
type switchProxy struct {
	*httptest.Server
	mu  sync.Mutex
	fwd *httputil.ReverseProxy
}

func newSwitchProxy(t *testing.T, target string) *switchProxy {
	p := &switchProxy{}
	p.set(t, target)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		fwd := p.fwd
		p.mu.Unlock()
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *switchProxy) set(t *testing.T, target string) {
	u, err := url.Parse(target)
	require.NoError(t, err)
	fwd := httputil.NewSingleHostReverseProxy(u)
	fwd.ErrorLog = log.New(io.Discard, "", 0)
	// While no Ferry listens, answer as a load balancer would: 503.
	fwd.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"no server","code":"unavailable"}`))
	}
	p.mu.Lock()
	p.fwd = fwd
	p.mu.Unlock()
}
