package push

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/ferry-mq/ferry/internal/rules"
	"github.com/ferry-mq/ferry/store"
)

// leaseSlack is added to a request's timeout for the lease of the message
// it carries, so the lease outlives the request and its settling (an ack
// after the lease ended is stale, and the message would be pushed again).
// It is also how long, past the request's timeout, a message that was in
// flight at a crash waits before another worker delivers it again (its
// group, or ordered key, waits as long): short, since settling takes
// milliseconds, not minutes.
const leaseSlack = 15 * time.Second

// pushResult is how one request went.
type pushResult struct {
	msg        store.Message
	publicID   string
	status     int // 0: no response
	err        string
	dur        time.Duration
	retryAfter *time.Duration
}

func (r pushResult) ok() bool   { return r.status >= 200 && r.status < 300 }
func (r pushResult) gone() bool { return r.status == http.StatusGone }

// deliver POSTs one message to the target and reports how it went.
func (p *Pusher) deliver(ctx context.Context, t store.PushTarget, m store.Message) pushResult {
	cfg := p.cfg
	r := pushResult{msg: m}
	r.publicID = store.FormatMessageID(m.ID)
	if m.EventID != nil {
		r.publicID = *m.EventID
	}
	body, header, err := pushBody(t, m)
	if err != nil {
		// A row no face would accept (written to the tables directly):
		// a failed attempt, so that it is dead-lettered with this error
		// after max_receives, never POSTed empty.
		r.err = "cannot encode the message: " + truncate(err.Error(), 500)
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(t.Push.TimeoutSeconds)*time.Second)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.Push.URL, bytes.NewReader(body))
	if err != nil {
		r.err = "cannot make the request: " + err.Error()
		return r
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", cfg.UserAgent)
	WebhookHeaders(req.Header, t.Secrets, r.publicID, start, body)
	resp, err := cfg.Client.Do(req)
	if err != nil {
		r.dur = time.Since(start)
		switch {
		case errors.Is(err, ErrForbiddenAddress):
			r.err = "refused: the URL resolves to a forbidden address"
		case ctx.Err() != nil:
			r.err = fmt.Sprintf("timeout: no response within %d s", t.Push.TimeoutSeconds)
		default:
			r.err = truncate(err.Error(), 1000)
		}
		return r
	}
	// Read (a bounded part of) the body within the timeout, so a slow body
	// counts against the endpoint, and the connection can be reused.
	_, rerr := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	r.dur = time.Since(start)
	r.status = resp.StatusCode
	switch {
	case r.ok() && rerr != nil && ctx.Err() != nil:
		r.err = fmt.Sprintf("timeout: the response body did not end within %d s", t.Push.TimeoutSeconds)
		r.status = 0
	case r.ok():
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		r.err = fmt.Sprintf("HTTP %d: redirects are not followed", resp.StatusCode)
	default:
		r.err = fmt.Sprintf("HTTP %d", resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			r.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
	}
	return r
}

// pushBody is what is POSTed, with its headers but the signature's: a
// subscription's event as stored, with its CloudEvents attributes
// (store.CloudDelivery) (or as a CloudEvent, by its push format:
// see cloudPayload), or a queue's message as a consumer would receive it
// (without a receipt). traceparent is passed through from the attributes
// when present and valid (sends and publishes refuse invalid ones; older
// rows may hold one, and a header net/http refuses would fail every
// attempt). A queue message's body that encoding/json cannot write
// (nesting deeper than it allows) is an error.
func pushBody(t store.PushTarget, m store.Message) ([]byte, http.Header, error) {
	body, traceparent, err := pushPayload(t, m)
	h := http.Header{"Content-Type": {"application/json"}}
	if err == nil && t.Subscription && t.Push != nil && t.Push.Format != "" && t.Push.Format != store.PushFormatStandard {
		body, err = cloudPayload(t.Push.Format, body, h)
	}
	if rules.ValidTraceparent(traceparent) {
		h.Set("traceparent", traceparent)
	}
	return body, h, err
}

func pushPayload(t store.PushTarget, m store.Message) ([]byte, string, error) {
	if t.Subscription {
		var ev struct {
			Attributes map[string]string `json:"attributes"`
		}
		_ = json.Unmarshal(m.Body, &ev)
		return store.CloudDelivery(m.Body, t.Topic), ev.Attributes["traceparent"], nil
	}
	attrs := map[string]string{}
	if len(m.Attributes) > 0 {
		_ = json.Unmarshal(m.Attributes, &attrs)
	}
	body, err := json.Marshal(struct {
		ID           string            `json:"id"`
		Body         json.RawMessage   `json:"body"`
		Attributes   map[string]string `json:"attributes"`
		Group        *string           `json:"group"`
		DedupID      *string           `json:"dedup_id"`
		ReceiveCount int               `json:"receive_count"`
		SentAt       time.Time         `json:"sent_at"`
	}{store.FormatMessageID(m.ID), m.Body, attrs, m.Group, m.DedupID, m.ReceiveCount, m.SentAt.UTC()})
	return body, attrs["traceparent"], err
}

// maxRetryAfter caps a receiver's Retry-After.
const maxRetryAfter = time.Hour

// parseRetryAfter reads a Retry-After header (seconds or an HTTP date),
// capped at maxRetryAfter; nil when absent or unreadable.
func parseRetryAfter(v string, now time.Time) *time.Duration {
	if v == "" {
		return nil
	}
	var d time.Duration
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return nil
		}
		d = time.Duration(min(s, int64(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = max(0, t.Sub(now))
	} else {
		return nil
	}
	d = min(d, maxRetryAfter)
	return &d
}

// rateLimiter spaces request starts evenly at rate per second (0: no
// limit), with a burst of one second's worth.
type rateLimiter struct {
	rate   int
	tokens float64
	last   time.Time
}

func (l *rateLimiter) setRate(rate int) {
	if rate != l.rate {
		l.rate, l.tokens, l.last = rate, float64(rate), time.Now()
	}
}

func (l *rateLimiter) refill() {
	now := time.Now()
	l.tokens = min(float64(l.rate), l.tokens+now.Sub(l.last).Seconds()*float64(l.rate))
	l.last = now
}

// allowance is how many requests may start now.
func (l *rateLimiter) allowance() int {
	if l.rate == 0 {
		return store.MaxPushInFlight
	}
	l.refill()
	return int(l.tokens)
}

func (l *rateLimiter) take() {
	if l.rate > 0 {
		l.tokens--
	}
}

// untilNext is how long until the next request may start.
func (l *rateLimiter) untilNext() time.Duration {
	if l.rate == 0 || l.tokens >= 1 {
		return time.Hour
	}
	return time.Duration((1 - l.tokens) / float64(l.rate) * float64(time.Second))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
