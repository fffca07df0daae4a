package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to one Ferry with one API key. Its zero value is not usable:
// make one with [New]. It is safe for concurrent use.
type Client struct {
	base       string
	key        string
	http       *http.Client
	retries    int
	minBackoff time.Duration
	maxBackoff time.Duration
}

// Option changes a [Client] made by [New].
type Option func(*Client)

// WithHTTPClient makes the client send its requests with h (for TLS
// settings, a proxy or a transport of your own). The default is an
// http.Client without a timeout: every call is bounded by its context, and
// a long poll lasts up to 20 s.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithRetries sets how many times a call that may be retried is repeated
// after its first attempt (default 4; 0 turns retries off).
func WithRetries(n int) Option { return func(c *Client) { c.retries = max(n, 0) } }

// WithBackoff sets the first and the largest wait between attempts (default
// 100 ms and 5 s); a Retry-After longer than the largest is still honoured.
func WithBackoff(minWait, maxWait time.Duration) Option {
	return func(c *Client) { c.minBackoff, c.maxBackoff = minWait, max(minWait, maxWait) }
}

// New returns a client for the Ferry at baseURL (e.g. http://127.0.0.1:8080)
// that authenticates with key (sent as a Bearer token).
func New(baseURL, key string, opts ...Option) *Client {
	c := &Client{
		base:       strings.TrimRight(baseURL, "/"),
		key:        key,
		http:       &http.Client{},
		retries:    4,
		minBackoff: 100 * time.Millisecond,
		maxBackoff: 5 * time.Second,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// call is one request: its method, path (with query), body and whether
// repeating it after an uncertain failure is harmless.
type call struct {
	method     string
	path       string
	query      url.Values
	body       any
	idempotent bool
	// status, when non-nil, receives the status of the last attempt's answer.
	status *int
	// raw, when body is nil, is the body sent as is, with contentType
	// (default application/json) and the headers in header.
	raw         []byte
	contentType string
	header      http.Header
}

// do sends the call (retrying it as the package doc says) and decodes a 2xx
// answer's body into out (when out is non-nil and there is a body).
func (c *Client) do(ctx context.Context, cl call, out any) error {
	body := cl.raw
	if cl.body != nil {
		var err error
		if body, err = json.Marshal(cl.body); err != nil {
			return fmt.Errorf("ferry: encode %s %s: %w", cl.method, cl.path, err)
		}
	}
	for attempt := 0; ; attempt++ {
		err := c.once(ctx, cl, body, out)
		if err == nil || attempt >= c.retries || !retryable(ctx, cl, err) {
			return err
		}
		if werr := sleep(ctx, c.backoff(attempt, err)); werr != nil {
			return err
		}
	}
}

// retryable reports whether err, from one attempt of cl, may be retried.
func retryable(ctx context.Context, cl call, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Status == http.StatusTooManyRequests {
			return true // nothing was written
		}
		return e.Temporary() && cl.idempotent
	}
	return cl.idempotent // a network error
}

// backoff is the wait before attempt+1: exponential with full jitter over
// the lower half, and at least the answer's Retry-After.
func (c *Client) backoff(attempt int, err error) time.Duration {
	d := c.minBackoff << min(attempt, 20)
	if d > c.maxBackoff || d <= 0 {
		d = c.maxBackoff
	}
	d = d/2 + rand.N(d/2+1) //nolint:gosec // jitter, not a secret
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > d {
		d = e.RetryAfter
	}
	return d
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// once sends one attempt of cl.
func (c *Client) once(ctx context.Context, cl call, body []byte, out any) error {
	u := c.base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, r)
	if err != nil {
		return fmt.Errorf("ferry: %s %s: %w", cl.method, cl.path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", cmp.Or(cl.contentType, "application/json"))
	}
	for k, vs := range cl.header {
		req.Header[k] = vs
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("ferry: %s %s: %w", cl.method, cl.path, err)
	}
	defer resp.Body.Close()
	if cl.status != nil {
		*cl.status = resp.StatusCode
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("ferry: %s %s: read answer: %w", cl.method, cl.path, err)
	}
	if resp.StatusCode >= 300 {
		return newError(resp.StatusCode, resp.Header, raw)
	}
	if t, ok := out.(*textBody); ok {
		*t = raw
		return nil
	}
	if out == nil || len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("ferry: %s %s: decode answer: %w", cl.method, cl.path, err)
	}
	return nil
}

// Ptr returns a pointer to v, for the optional fields of requests
// (QueueConfig{MaxReceives: client.Ptr(5)}).
func Ptr[T any](v T) *T { return &v }
