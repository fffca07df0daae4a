package docs_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/handlers/sqs"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// proxy stands between the docs' commands and Ferry: it checks every
// response against openapi/openapi.yaml, failing the test of the command
// that got it, and records each request's status for that command. The
// SQS face's requests ([isSQS]) are recorded, not checked (the spec does
// not describe them; handlers/sqs tests them), and keep their Host, which
// their SigV4 signature covers and from which Ferry makes QueueUrls that
// lead back through the proxy.
type proxy struct {
	url string
	v   *openapitest.Validator

	mu   sync.Mutex
	t    *testing.T // the test of the command running now
	seen []exchange
}

// exchange is one request and the status it got.
type exchange struct {
	method, path string
	status       int
}

// startProxy starts a proxy to the Ferry at target, stopped when t ends.
func startProxy(t *testing.T, target string) *proxy {
	u, err := url.Parse(target)
	require.NoError(t, err)
	p := &proxy{v: openapitest.New(t), t: t}
	srv := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			if isSQS(r.In) {
				r.Out.Host = r.In.Host
			}
		},
		ModifyResponse: p.record,
	})
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// begin starts recording the requests of a command of test t.
func (p *proxy) begin(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t, p.seen = t, nil
}

// end returns the requests made since begin.
func (p *proxy) end() []exchange {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

func (p *proxy) record(resp *http.Response) error {
	body, err := io.ReadAll(resp.Body)
	if closeErr := resp.Body.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	req := resp.Request
	p.mu.Lock()
	t := p.t
	p.seen = append(p.seen, exchange{method: req.Method, path: req.URL.Path, status: resp.StatusCode})
	p.mu.Unlock()
	if !isSQS(req) {
		p.v.Check(t, req, resp.StatusCode, resp.Header, body)
	}
	return nil
}

// isSQS reports whether r is a request to the SQS face: a POST to / or to
// a QueueUrl's path.
func isSQS(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/"+sqs.AccountID+"/"))
}
