package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/push"
	"github.com/ferry-mq/ferry/store"
)

// secretOverlap is how long the replaced secret keeps signing after a
// rotation.
const secretOverlap = 24 * time.Hour

// pushRequest is the push member of a PUT; null removes push.
type pushRequest struct {
	URL                *string `json:"url"`
	TimeoutSeconds     *int    `json:"timeout_seconds"`
	MaxInFlight        *int    `json:"max_in_flight"`
	RateLimitPerSecond *int    `json:"rate_limit_per_second"`
	Format             *string `json:"format"`
}

// pushPatch validates a PUT's raw push member (nil: absent) and makes the
// store's patch, with a fresh secret to issue if the target has none. A
// URL the target does not push to yet needs receive on the target besides
// the route's manage (pushURLAllowed), checked before the URL itself: its
// host is not resolved for a key that may not set it. A change of URL,
// push: null included, is noted for the request's audit entry.
func (h *handler) pushPatch(c echo.Context, raw json.RawMessage) (*store.PushPatch, error) {
	if raw == nil {
		return nil, nil
	}
	if string(bytes.TrimSpace(raw)) == "null" {
		before, err := h.pushURLNow(c)
		if err != nil {
			return nil, err
		}
		if before != "" {
			notePushChange(c, before, "")
		}
		return &store.PushPatch{Remove: true}, nil
	}
	req, err := decodePush(raw)
	if err != nil {
		return nil, err
	}
	if err := checkPushFormat(c, req.Format); err != nil {
		return nil, err
	}
	keep := false
	if req.URL != nil {
		if keep, err = h.pushURLAllowed(c, *req.URL); err != nil {
			return nil, err
		}
		if err := h.checkPushURL(c.Request().Context(), *req.URL); err != nil {
			return nil, err
		}
	}
	return &store.PushPatch{
		URL: req.URL, TimeoutSeconds: req.TimeoutSeconds, MaxInFlight: req.MaxInFlight,
		RateLimitPerSecond: req.RateLimitPerSecond, Format: req.Format, NewSecret: push.NewSigningSecret(), KeepURL: keep,
	}, nil
}

// checkPushFormat refuses a push format that is not one, and a CloudEvents
// format for a queue (its messages are no events).
func checkPushFormat(c echo.Context, format *string) error {
	if format == nil {
		return nil
	}
	switch *format {
	case store.PushFormatStandard:
		return nil
	case store.PushFormatCloudEvents, store.PushFormatCloudEventsBinary:
		if ref, err := targetOf(c); err != nil || ref.isSub() {
			return err
		}
		return invalid("push.format", "must be standard for a queue: only a subscription's events are CloudEvents")
	}
	return invalid("push.format", "must be standard, cloudevents or cloudevents-binary")
}

// decodePush decodes a push member that is not null, and checks its
// numbers.
func decodePush(raw json.RawMessage) (pushRequest, error) {
	var req pushRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, invalid("push", "must be null or an object with url, timeout_seconds, max_in_flight, rate_limit_per_second and format (%s)", jsonProblem(err).Detail)
	}
	var cs checks
	cs.intRange("push.timeout_seconds", req.TimeoutSeconds, 1, store.MaxPushTimeoutSeconds)
	cs.intRange("push.max_in_flight", req.MaxInFlight, 1, store.MaxPushInFlight)
	cs.intRange("push.rate_limit_per_second", req.RateLimitPerSecond, 0, store.MaxPushRateLimit)
	return req, cs.err()
}

// pushURLNow is the push URL of the route's target as stored now: "" when
// the target pushes nowhere or does not exist.
func (h *handler) pushURLNow(c echo.Context) (string, error) {
	ref, err := targetOf(c)
	if err != nil {
		return "", err
	}
	q, err := h.resolve(c.Request().Context(), ref, false)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	case q.Push == nil:
		return "", nil
	}
	return q.Push.URL, nil
}

// checkPushURL refuses a push URL that is not one (400), or that names or
// resolves to an address push may not reach (push.CheckURL).
func (h *handler) checkPushURL(ctx context.Context, url string) error {
	err := push.CheckURL(ctx, url, h.AllowPrivatePush, nil)
	if err == nil {
		return nil
	}
	// A name that does not exist is the client's mistake; a resolver that
	// fails or times out is not.
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && !dnsErr.IsNotFound {
		p := problem(http.StatusServiceUnavailable, codeUnavailable, "could not resolve push.url's host just now; nothing was written, retry")
		p.header = http.Header{"Retry-After": []string{"1"}}
		return p
	}
	var uerr *push.URLError
	if errors.As(err, &uerr) {
		return invalid("push.url", "%s", uerr.Reason)
	}
	return err
}

// pushReply is a target's push configuration and state; null when the
// target is pulled.
type pushReply struct {
	URL                string     `json:"url"`
	TimeoutSeconds     int        `json:"timeout_seconds"`
	MaxInFlight        int        `json:"max_in_flight"`
	RateLimitPerSecond int        `json:"rate_limit_per_second"`
	Format             string     `json:"format"`
	FailingSince       *time.Time `json:"failing_since"`
	DisabledAt         *time.Time `json:"disabled_at"`
	DisabledReason     *string    `json:"disabled_reason"`
}

// toPushResponse is q's push as a key sees it: whole to a key that may
// manage q (whole), else with push.url's query values masked (maskedURL).
func toPushResponse(q store.Queue, whole bool) *pushReply {
	if q.Push == nil {
		return nil
	}
	url := q.Push.URL
	if !whole {
		url = maskedURL(url)
	}
	utc := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := t.UTC()
		return &u
	}
	return &pushReply{
		URL: url, TimeoutSeconds: q.Push.TimeoutSeconds, MaxInFlight: q.Push.MaxInFlight,
		RateLimitPerSecond: q.Push.RateLimitPerSecond, Format: q.Push.Format, FailingSince: utc(q.FailingSince),
		DisabledAt: utc(q.DisabledAt), DisabledReason: q.DisabledReason,
	}
}

// maskedURL is a push URL as a key that may not manage its target sees
// it: the value of each parameter of its query is replaced by ***, and a
// part of the query that is no name=value pair is replaced whole, so a
// token in the query is not shown ("https://h/p?token=***&v=***"); the
// scheme, host, port and path are kept. Push URLs have neither user info
// nor a fragment (push.CheckURL).
func maskedURL(u string) string {
	base, query, ok := strings.Cut(u, "?")
	if !ok || query == "" {
		return u
	}
	parts := strings.Split(query, "&")
	for i, part := range parts {
		if name, _, ok := strings.Cut(part, "="); ok {
			parts[i] = name + "=" + maskedValue
		} else if part != "" {
			parts[i] = maskedValue
		}
	}
	return base + "?" + strings.Join(parts, "&")
}

// maskedValue stands for a value maskedURL hides.
const maskedValue = "***"

// secretReply wraps a PUT's answer with the signing secret issued by it,
// shown this once.
func secretReply(c echo.Context, status int, body any, secret string) error {
	if secret == "" {
		return reply(c, status, body)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	m["signing_secret"], _ = json.Marshal(secret)
	return reply(c, status, m)
}

// pushChanged tells the target's push worker, wherever it runs, that its
// configuration changed (it applies from the worker's next claim).
func (h *handler) pushChanged(id int64) {
	h.Notifier.Published([]int64{store.PushConfigWakeKey(id)})
}

// kickPush starts push delivery of the target now (a worker, unless one
// is already there, here or on another instance) instead of at the next
// sweep.
func (h *handler) kickPush(ctx context.Context, q store.Queue) {
	if q.Push == nil || q.DisabledAt != nil || h.Pusher == nil {
		return
	}
	h.Pusher.Kick(ctx, []int64{q.ID})
}

// pushTarget resolves the route's queue or subscription, which must have
// push configured (409 otherwise).
func (h *handler) pushTarget(c echo.Context) (targetRef, store.Queue, error) {
	ref, q, err := h.target(c)
	if err != nil {
		return ref, q, err
	}
	if q.Push == nil {
		return ref, q, problem(http.StatusConflict, codeConflict, "push is not configured here: there is no secret to rotate or push to enable")
	}
	return ref, q, nil
}

// pushRotateSecret issues a new signing secret; the old one keeps signing
// for 24 hours, so receivers can switch without losing a request.
func (h *handler) pushRotateSecret(c echo.Context) error {
	_, q, err := h.pushTarget(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	secret := push.NewSigningSecret()
	if err := store.SecretRotate(ctx, h.Pool, q.ID, secret, secretOverlap); err != nil {
		return err
	}
	h.pushChanged(q.ID)
	return reply(c, http.StatusOK, map[string]any{
		"signing_secret":          secret,
		"previous_secret_expires": time.Now().Add(secretOverlap).UTC().Truncate(time.Second),
	})
}

// pushEnable re-enables push delivery that was disabled (410 Gone, or
// failing for too long) and starts delivering the backlog.
func (h *handler) pushEnable(c echo.Context) error {
	ref, q, err := h.pushTarget(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if err := store.PushEnable(ctx, h.Pool, q.ID); err != nil {
		return err
	}
	h.pushChanged(q.ID)
	h.forget(ctx, ref)
	if h.Pusher != nil {
		h.Pusher.Forget() // the target set it kicks from now includes this one
	}
	q.DisabledAt = nil
	h.kickPush(ctx, q)
	return c.NoContent(http.StatusNoContent)
}

type attemptReply struct {
	MessageID  string    `json:"message_id"`
	Attempt    int       `json:"attempt"`
	StatusCode *int      `json:"status_code"`
	Error      *string   `json:"error"`
	DurationMS int64     `json:"duration_ms"`
	At         time.Time `json:"at"`
}

// pushAttempts lists the latest push attempts, newest first.
func (h *handler) pushAttempts(c echo.Context) error {
	ref, err := targetOf(c)
	if err != nil {
		return err
	}
	status := c.QueryParam("status")
	switch status {
	case "", "failed", "succeeded":
	default:
		return invalid("status", `must be "failed" or "succeeded"`)
	}
	limit, err := limitOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	q, err := h.resolve(ctx, ref, false)
	if err != nil {
		return err
	}
	attempts, err := store.PushAttemptList(ctx, h.Pool, q.ID, status, int(limit))
	if err != nil {
		return err
	}
	out := make([]attemptReply, len(attempts))
	for i, a := range attempts {
		out[i] = attemptReply{
			MessageID: a.MessageID, Attempt: a.Attempt, StatusCode: a.StatusCode, Error: a.Error,
			DurationMS: a.Duration.Milliseconds(), At: a.At.UTC(),
		}
	}
	return reply(c, http.StatusOK, map[string]any{"attempts": out})
}

// forget drops the target from the caches after a change.
func (h *handler) forget(ctx context.Context, r targetRef) {
	if !r.isSub() {
		h.queues.Forget(r.queue)
		return
	}
	if t, err := h.topics.Get(ctx, h.Pool, r.topic); err == nil {
		h.subs.Forget(store.SubscriptionKey(t.ID, r.sub))
	}
}

// pushURLPermission is what a PUT of the route's queue or subscription
// that sets its push URL needs beyond the route's manage: receive on it,
// since whoever chooses where its messages are pushed receives them. A
// PUT that gives the URL the target pushes to already changes nothing,
// and needs manage only; one that removes push (null) too.
func pushURLPermission(c echo.Context) access.Permission {
	kind := access.Queue
	if c.Param("sub") != "" {
		kind = access.Subscription
	}
	return access.Permission{Kind: kind, Name: resourceName(c, kind), Action: access.Receive}
}

// mayChangePushURL reports whether the request's key may set the push URL
// of the route's target to a new one, and if not the permission it lacks.
func mayChangePushURL(c echo.Context) (access.Permission, bool) {
	p := pushURLPermission(c)
	return p, keyOf(c).Allows(p.Kind, p.Name, p.Action)
}

// pushURLAllowed checks that the request's key may have the route's target
// push to url: one with receive on the target may (mayChangePushURL); any
// other only when url is the URL the target pushes to now, and then the
// store keeps it so (keep: store.PushPatch.KeepURL), whatever changes
// meanwhile. A 403 names the missing permission, also when the target
// does not exist (no 404 tells names). A new URL is noted for the
// request's audit entry, allowed or not.
func (h *handler) pushURLAllowed(c echo.Context, url string) (keep bool, err error) {
	before, err := h.pushURLNow(c)
	if err != nil {
		return false, err
	}
	missing, may := mayChangePushURL(c)
	if before == url {
		return !may, nil
	}
	notePushChange(c, before, url)
	if !may {
		return false, h.forbidden(missing)
	}
	return false, nil
}

// upsertError is the answer to a failed upsert of the route's queue or
// subscription: a 403 when the key would have changed the push URL it may
// not change (it changed meanwhile: see pushURLAllowed).
func (h *handler) upsertError(c echo.Context, err error) error {
	if errors.Is(err, store.ErrPushURLKept) {
		return h.forbidden(pushURLPermission(c))
	}
	return err
}
