package client

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// PushConfig is the push member of a queue's or subscription's PUT: the
// fields given are set (URL is required when the target has no push yet),
// the others keep their value (or take their default when push is new).
type PushConfig struct {
	URL                string `json:"url,omitempty"`
	TimeoutSeconds     *int   `json:"timeout_seconds,omitempty"`
	MaxInFlight        *int   `json:"max_in_flight,omitempty"`
	RateLimitPerSecond *int   `json:"rate_limit_per_second,omitempty"`
	// Format is the body pushed: "standard" (the default), or, for a
	// subscription only, "cloudevents" or "cloudevents-binary".
	Format string `json:"format,omitempty"`
}

// Push is a queue's or subscription's push configuration and state.
type Push struct {
	URL                string     `json:"url"`
	TimeoutSeconds     int        `json:"timeout_seconds"`
	MaxInFlight        int        `json:"max_in_flight"`
	RateLimitPerSecond int        `json:"rate_limit_per_second"`
	Format             string     `json:"format"`
	FailingSince       *time.Time `json:"failing_since"`
	DisabledAt         *time.Time `json:"disabled_at"`
	DisabledReason     *string    `json:"disabled_reason"`
}

// SecretRotation is the answer of a rotate-secret: the new signing secret,
// and until when the previous one still signs too.
type SecretRotation struct {
	SigningSecret         string    `json:"signing_secret"`
	PreviousSecretExpires time.Time `json:"previous_secret_expires"`
}

// PushAttempt is one recorded push delivery attempt. StatusCode is nil when
// no answer came.
type PushAttempt struct {
	MessageID  string    `json:"message_id"`
	Attempt    int       `json:"attempt"`
	StatusCode *int      `json:"status_code"`
	Error      *string   `json:"error"`
	DurationMS int64     `json:"duration_ms"`
	At         time.Time `json:"at"`
}

// Attempts filters a list of push attempts: Status "failed", "succeeded"
// or "" (all); at most Limit (0: the server's default).
type Attempts struct {
	Status string
	Limit  int
}

// withRemovedPush marshals v (a struct's alias without MarshalJSON) and,
// when remove is set, adds "push": null to the object.
func withRemovedPush(v any, remove bool) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || !remove {
		return b, err
	}
	b = bytes.TrimSuffix(b, []byte("}"))
	if len(b) > 1 {
		b = append(b, ',')
	}
	return append(b, `"push":null}`...), nil
}

// readNullables reads the members of a queue's or subscription's PUT (b)
// that say something with null, as UnmarshalJSON reads them: the
// dead-letter queue (null: a pointer to "") and push (null: remove).
func readNullables(b []byte, dlq **string, remove *bool) error {
	var v struct {
		DeadLetterQueue json.RawMessage `json:"dead_letter_queue"`
		Push            json.RawMessage `json:"push"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.DeadLetterQueue != nil {
		s := ""
		if string(v.DeadLetterQueue) != "null" {
			if err := json.Unmarshal(v.DeadLetterQueue, &s); err != nil {
				return err
			}
		}
		*dlq = &s
	}
	*remove = string(v.Push) == "null"
	return nil
}

// The push routes of a target (a queue's or a subscription's path).

func (c *Client) rotateSecret(ctx context.Context, base string) (*SecretRotation, error) {
	out := &SecretRotation{}
	// Not retried on 503: a repeat would rotate again, and the secret the
	// first attempt made would be lost with its answer.
	if err := c.do(ctx, call{method: http.MethodPost, path: base + "/rotate-secret"}, out); err != nil {
		return nil, err
	}
	return out, nil
}

func (c *Client) enablePush(ctx context.Context, base string) error {
	return c.do(ctx, call{method: http.MethodPost, path: base + "/enable", idempotent: true}, nil)
}

func (c *Client) listAttempts(ctx context.Context, base string, a Attempts) ([]PushAttempt, error) {
	q := url.Values{}
	if a.Status != "" {
		q.Set("status", a.Status)
	}
	if a.Limit > 0 {
		q.Set("limit", strconv.Itoa(a.Limit))
	}
	var out struct {
		Attempts []PushAttempt `json:"attempts"`
	}
	err := c.do(ctx, call{method: http.MethodGet, path: base + "/attempts", query: q, idempotent: true}, &out)
	return out.Attempts, err
}
