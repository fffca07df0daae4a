// Package openapitest checks HTTP responses against Ferry's OpenAPI document
// (openapi/openapi.yaml), for the tests of other packages. The rule it serves:
// every response a test receives is checked against the spec.
//
// The simplest use is a client whose every response is checked:
//
//	v := openapitest.New(t)
//	client := v.Client(t, nil)
//	resp, err := client.Get(srv.URL + "/v1/queues/q1")
//
// or, with a recorded response (an httptest.ResponseRecorder):
//
//	v.Check(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
//
// A request must name an operation of the spec (method and path); a response
// must have a status the operation declares (or fall under its `default`),
// the declared headers, content type and body schema, and a body only where
// the spec declares one. Problems (application/problem+json) must also carry
// the response's status in their `status` member. Requests themselves are
// not validated, so tests may send invalid requests on purpose; a client
// under test whose requests must be valid uses RequestClient instead.
//
// Routes outside the spec (a test of 404 for an unknown path, or 405) cannot
// be checked by operation: send them with a plain client and check the
// answer with CheckProblem.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/openapi"
)

const problemMediaType = "application/problem+json"

// Validator checks responses against the spec. It is safe for concurrent use
// and shared by every test of a process (see New).
type Validator struct {
	router  routers.Router
	problem *openapi3.SchemaRef
	options *openapi3filter.Options
}

// load parses the spec and builds the router once per process: tests in many
// packages call New, often in parallel, and the document never changes while
// the process runs.
var load = sync.OnceValues(func() (*Validator, error) { //nolint:gochecknoglobals // once per test process, read only
	doc, err := openapi.Load()
	if err != nil {
		return nil, err
	}
	return newValidator(doc)
})

// newValidator builds a Validator for doc, which it changes (servers).
func newValidator(doc *openapi3.T) (*Validator, error) {
	// The spec's servers ("/") would make the router match only the host
	// and base path they name. Without servers every host matches, so an
	// httptest server's http://127.0.0.1:41234 and a recorder's example.com
	// both route by path alone.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapitest: build router: %w", err)
	}
	var problem *openapi3.SchemaRef
	if doc.Components != nil {
		problem = doc.Components.Schemas["Problem"]
	}
	if problem == nil {
		return nil, fmt.Errorf("openapitest: the spec has no Problem schema")
	}
	return &Validator{
		router:  router,
		problem: problem,
		options: &openapi3filter.Options{
			// The request was already sent; tests may send bad requests on
			// purpose, so neither its body nor its key is judged.
			ExcludeRequestBody: true,
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			// A status the operation does not declare (and no default
			// covers) is a mismatch, not a pass.
			IncludeResponseStatus: true,
			MultiError:            true,
			// Name the failing field without dumping its schema: the report
			// shows the body instead.
			SchemaValidationOptions: []openapi3.SchemaValidationOption{openapi3.DisableSchemaErrorDetails()},
		},
	}, nil
}

// New returns the process-wide Validator, loading the spec on first use. A
// spec that does not load or validate fails the test at once.
func New(t testing.TB) *Validator {
	t.Helper()
	v, err := load()
	if err != nil {
		t.Fatalf("openapitest: %v", err)
	}
	return v
}

// Check validates one response to req: status, headers and body against the
// operation that req's method and path name in the spec. Each mismatch is
// reported with t.Errorf (naming method, path and status), so a test goes on
// and can report more. req's body is not read. Check may be called from any
// goroutine while the test runs.
func (v *Validator) Check(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	if err := v.check(req, status, header, body); err != nil {
		t.Errorf("openapi: %s %s → %d: %v\nbody: %s", req.Method, req.URL.Path, status, err, excerpt(body))
	}
}

func (v *Validator) check(req *http.Request, status int, header http.Header, body []byte) error {
	route, pathParams, err := v.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("no operation in the spec for this method and path (%w); to test a route outside the spec, use a plain client and CheckProblem", err)
	}
	if header == nil {
		header = http.Header{}
	}

	responseRef := route.Operation.Responses.Status(status)
	if responseRef == nil {
		responseRef = route.Operation.Responses.Default()
		// Say so plainly rather than as a content-type mismatch with the
		// default problem response.
		if responseRef != nil && !isProblem(header) {
			return fmt.Errorf("status %d is not declared for this operation, and an undeclared status must be a problem (%s)", status, problemMediaType)
		}
	}
	// kin-openapi accepts any body where the spec declares none (e.g. 204).
	if responseRef != nil && responseRef.Value != nil && len(responseRef.Value.Content) == 0 && len(body) > 0 {
		return fmt.Errorf("status %d declares no body, got %d bytes", status, len(body))
	}

	ctx := context.Background()
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request:    req,
			PathParams: pathParams,
			Route:      route,
			Options:    v.options,
		},
		Status:  status,
		Header:  header,
		Options: v.options,
	}
	input.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, input); err != nil {
		return err
	}
	if isProblem(header) {
		return problemStatus(status, body)
	}
	return nil
}

// CheckProblem validates a response that is not tied to an operation of the
// spec, such as the 404 for an unknown path or the 405 for a method a path
// does not have: it must be an application/problem+json Problem whose
// `status` is the response's. Mismatches are reported with t.Errorf.
func (v *Validator) CheckProblem(t testing.TB, status int, header http.Header, body []byte) {
	t.Helper()
	if err := v.checkProblem(status, header, body); err != nil {
		t.Errorf("openapi: problem response %d: %v\nbody: %s", status, err, excerpt(body))
	}
}

func (v *Validator) checkProblem(status int, header http.Header, body []byte) error {
	if !isProblem(header) {
		return fmt.Errorf("Content-Type is %q, want %s", header.Get("Content-Type"), problemMediaType)
	}
	var value any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&value); err != nil {
		return fmt.Errorf("body is not JSON: %w", err)
	}
	err := v.problem.Value.VisitJSON(value,
		openapi3.MultiErrors(), openapi3.VisitAsResponse(), openapi3.DisableSchemaErrorDetails())
	if err != nil {
		return fmt.Errorf("body does not match Problem: %w", err)
	}
	return problemStatus(status, body)
}

// excerpt shortens a body for a failure report.
func excerpt(body []byte) string {
	const max = 2000
	if len(body) > max {
		return fmt.Sprintf("%s… (%d bytes)", body[:max], len(body))
	}
	return string(body)
}

func isProblem(header http.Header) bool {
	mediaType, _, err := mime.ParseMediaType(header.Get("Content-Type"))
	return err == nil && mediaType == problemMediaType
}

// problemStatus checks that a problem's `status` member is the HTTP status.
func problemStatus(status int, body []byte) error {
	var p struct {
		Status *int `json:"status"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("problem body is not JSON: %w", err)
	}
	if p.Status == nil || *p.Status != status {
		return fmt.Errorf("problem status member is %v, want the response status %d", deref(p.Status), status)
	}
	return nil
}

func deref(p *int) any {
	if p == nil {
		return "absent"
	}
	return *p
}

// Client returns an http.Client whose every response is checked with Check
// before the caller sees it. The body is read in full and put back, so the
// caller reads it as usual. base is the transport that does the work;
// nil means http.DefaultTransport. Transport errors pass through unchecked.
func (v *Validator) Client(t testing.TB, base http.RoundTripper) *http.Client {
	if base == nil {
		base = http.DefaultTransport
	}
	return &http.Client{Transport: &checkingTransport{v: v, t: t, base: base}}
}

// RequestClient returns a client like Client's that also checks every
// request before sending it: method, path, query, headers and JSON body
// against the operation they name (reported with t.Errorf; the request is
// sent all the same). For a client under test, such as package client.
func (v *Validator) RequestClient(t testing.TB, base http.RoundTripper) *http.Client {
	c := v.Client(t, base)
	c.Transport.(*checkingTransport).requests = true
	return c
}

type checkingTransport struct {
	v        *Validator
	t        testing.TB
	base     http.RoundTripper
	requests bool
}

func (c *checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.requests {
		if err := c.v.checkRequest(req); err != nil {
			c.t.Errorf("openapi: request %s %s: %v", req.Method, req.URL.Path, err)
		}
	}
	resp, err := c.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	closeErr := resp.Body.Close()
	if err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, fmt.Errorf("openapitest: read response body of %s %s: %w", req.Method, req.URL.Path, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	c.v.Check(c.t, req, resp.StatusCode, resp.Header, body)
	return resp, nil
}

// checkRequest validates req (its body read and put back) against the spec.
func (v *Validator) checkRequest(req *http.Request) error {
	route, pathParams, err := v.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("no operation in the spec for this method and path: %w", err)
	}
	var body []byte
	if req.Body != nil {
		if body, err = io.ReadAll(req.Body); err != nil {
			return fmt.Errorf("read request body: %w", err)
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	clone := req.Clone(req.Context())
	clone.Body = io.NopCloser(bytes.NewReader(body))
	opts := *v.options
	opts.ExcludeRequestBody = false
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: clone, PathParams: pathParams, Route: route, Options: &opts,
	})
}

// CheckSchema requires body (JSON, its numbers kept exact) to match the
// spec's schema of that name, read as a request or as a response, when ok,
// and not to match it otherwise: for tables of example bodies.
func CheckSchema(t testing.TB, doc *openapi3.T, schema, body string, asRequest, ok bool) {
	t.Helper()
	var value any
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&value), body)
	ref := doc.Components.Schemas[schema]
	require.NotNil(t, ref, schema)
	opt := openapi3.VisitAsResponse()
	if asRequest {
		opt = openapi3.VisitAsRequest()
	}
	err := ref.Value.VisitJSON(value, opt)
	if ok {
		require.NoError(t, err, "%s %s", schema, body)
	} else {
		require.Error(t, err, "%s %s", schema, body)
	}
}
