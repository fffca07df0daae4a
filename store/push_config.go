package store

import (
	"context"
	"errors"
	"math"
	"time"
)

// PushConfig is where and how the server delivers a queue's messages (or a
// subscription's events): an HTTP POST per message to URL, signed.
type PushConfig struct {
	URL                string
	TimeoutSeconds     int
	MaxInFlight        int
	RateLimitPerSecond int // 0 = no limit
	// Format is the body pushed: PushFormatStandard (the default),
	// PushFormatCloudEvents or PushFormatCloudEventsBinary (for a
	// subscription's events only).
	Format string
}

// The push formats (API.md § CloudEvents in and out).
const (
	PushFormatStandard          = "standard"
	PushFormatCloudEvents       = "cloudevents"
	PushFormatCloudEventsBinary = "cloudevents-binary"
)

// Bounds of a PushConfig, part of the contract (openapi.yaml): the
// handlers refuse settings outside them, and the push worker sizes its
// buffers by MaxPushInFlight.
const (
	MaxPushTimeoutSeconds = 60
	MaxPushInFlight       = 1000
	MaxPushRateLimit      = 10000 // per second
)

// DefaultPushConfig is what a new push configuration gets for every field
// not given (the URL is always required).
func DefaultPushConfig() PushConfig {
	return PushConfig{TimeoutSeconds: 10, MaxInFlight: 10, Format: PushFormatStandard}
}

// PushState is how push delivery is going.
type PushState struct {
	// FailingSince is when the current run of failed attempts began
	// (nil after a success).
	FailingSince *time.Time
	// DisabledAt is set when push was stopped: the endpoint answered 410
	// Gone, or failed for too long. Deliveries wait (and expire by the
	// retention) until push is enabled again.
	DisabledAt     *time.Time
	DisabledReason *string
}

// PushPatch is the push member of a PUT: Remove (push: null) makes the
// queue a pull queue again; otherwise the given fields change, and a queue
// without push gets it (URL then required).
type PushPatch struct {
	Remove             bool
	URL                *string
	TimeoutSeconds     *int
	MaxInFlight        *int
	RateLimitPerSecond *int
	Format             *string
	// NewSecret is the signing secret to issue if the queue has none
	// (made by the caller: the store does not know the secret format).
	NewSecret string
	// KeepURL: URL may only repeat the URL the queue pushes to now; any
	// other (a first one too) fails the upsert with ErrPushURLKept. It is
	// checked on the row as the upsert locked it, so a change made
	// meanwhile cannot slip past the caller's own check.
	KeepURL bool
}

// ErrPushURLKept is the error of an upsert whose [PushPatch] has KeepURL
// and would change the push URL.
var ErrPushURLKept = errors.New("the push URL may not be changed by this request")

func (p *PushPatch) apply(cur *PushConfig) (*PushConfig, error) {
	if p == nil {
		return cur, nil
	}
	if p.Remove {
		return nil, nil
	}
	c := DefaultPushConfig()
	if cur != nil {
		c = *cur
	}
	set := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	if p.URL != nil {
		if p.KeepURL && (cur == nil || cur.URL != *p.URL) {
			return nil, ErrPushURLKept
		}
		c.URL = *p.URL
	}
	set(&c.TimeoutSeconds, p.TimeoutSeconds)
	set(&c.MaxInFlight, p.MaxInFlight)
	set(&c.RateLimitPerSecond, p.RateLimitPerSecond)
	if p.Format != nil {
		c.Format = *p.Format
	}
	if c.URL == "" {
		return nil, &ValidationError{Field: "push.url", Message: "is required"}
	}
	return &c, nil
}

func (c *PushConfig) equal(o *PushConfig) bool {
	if c == nil || o == nil {
		return c == o
	}
	return *c == *o
}

// PushConfigWakeKey is the [Notifier] key that announces a change of the
// push configuration of the queue (or subscription) queueID to its push
// worker, wherever it runs, and to every instance's Pusher (which then
// sweeps); the release of a push lease is announced on it too. Queues use
// their id as key and topics minus theirs; these keys lie below both.
func PushConfigWakeKey(queueID int64) int64 { return math.MinInt64/2 - queueID }

// IsPushConfigWakeKey reports whether a [Notifier] key is a
// [PushConfigWakeKey], and not one of the fixed keys at the bottom of the
// range ([KeysWakeKey], [RelayWakeKey], [KeyCreatedWakeKey]): those announce
// other things, and a Pusher that took them for push configuration
// changes would sweep at every SQL API publish.
func IsPushConfigWakeKey(id int64) bool {
	return id <= PushConfigWakeKey(0) && id > math.MinInt64+1<<20
}

// PushEnable re-enables push on a queue where it was disabled and clears
// its failure state. [ErrNotFound] if the queue does not exist or has no
// push.
func PushEnable(ctx context.Context, db DBTX, queueID int64) error {
	tag, err := db.Exec(ctx, `
		UPDATE ferry.queues SET push_disabled_at = NULL, push_disabled_reason = NULL, push_failing_since = NULL
		WHERE id = $1 AND push_url IS NOT NULL`, queueID)
	if err == nil && tag.RowsAffected() == 0 {
		err = ErrNotFound
	}
	return interpretError("push enable", err)
}

// SecretRotate makes secret the queue's signing secret; the one it
// replaces keeps signing (as a second signature) for overlap.
// [ErrNotFound] if the queue does not exist or has no push.
func SecretRotate(ctx context.Context, db DBTX, queueID int64, secret string, overlap time.Duration) error {
	tag, err := db.Exec(ctx, `
		UPDATE ferry.queues SET previous_secret = signing_secret, signing_secret = $2,
			previous_secret_until = now() + $3 * interval '1 millisecond'
		WHERE id = $1 AND push_url IS NOT NULL`, queueID, secret, overlap.Milliseconds())
	if err == nil && tag.RowsAffected() == 0 {
		err = ErrNotFound
	}
	return interpretError("secret rotate", err)
}
