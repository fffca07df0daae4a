package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// QueueConfig is a queue's configuration as PUT sends it: a nil field is
// left out (its default on create, its current value on update).
type QueueConfig struct {
	VisibilityTimeoutSeconds *int   `json:"visibility_timeout_seconds,omitempty"`
	MaxReceives              *int   `json:"max_receives,omitempty"`
	RetentionSeconds         *int   `json:"retention_seconds,omitempty"`
	DelaySeconds             *int   `json:"delay_seconds,omitempty"`
	DedupWindowSeconds       *int   `json:"dedup_window_seconds,omitempty"`
	MaxDepth                 *int64 `json:"max_depth,omitempty"`
	RetryMinSeconds          *int   `json:"retry_min_seconds,omitempty"`
	RetryMaxSeconds          *int   `json:"retry_max_seconds,omitempty"`
	// ReceiveWaitSeconds is the long poll of a receive that gives none (0 to 20).
	ReceiveWaitSeconds *int `json:"receive_wait_seconds,omitempty"`
	// MaxMessageSize is the queue's own size limit in bytes (0: the server's).
	MaxMessageSize *int `json:"max_message_size,omitempty"`
	// ContentBasedDedup gives a message sent without a dedup id the SHA-256
	// of its body as one.
	ContentBasedDedup *bool `json:"content_based_dedup,omitempty"`
	// Tags replaces the queue's tags when not nil (an empty, non-nil map
	// removes them all).
	Tags map[string]string `json:"-"`
	// DeadLetterQueue names the queue that takes this queue's dead letters
	// (nil leaves it as it is, a pointer to "" clears it).
	DeadLetterQueue *string `json:"-"`
	// Push sets or changes push delivery; RemovePush turns it off (the
	// queue is pulled again).
	Push       *PushConfig `json:"push,omitempty"`
	RemovePush bool        `json:"-"`
}

// MarshalJSON writes the fields set, with "push": null for RemovePush,
// "dead_letter_queue": null for a pointer to "" and "tags": {} for an
// empty, non-nil Tags.
func (q QueueConfig) MarshalJSON() ([]byte, error) {
	type plain QueueConfig
	v := struct {
		plain
		DeadLetterQueue *nullable          `json:"dead_letter_queue,omitempty"`
		Tags            *map[string]string `json:"tags,omitempty"`
	}{plain: plain(q), DeadLetterQueue: nullableOf(q.DeadLetterQueue)}
	if q.Tags != nil {
		v.Tags = &q.Tags
	}
	return withRemovedPush(v, q.RemovePush)
}

// UnmarshalJSON reads what MarshalJSON writes (a configuration kept as
// JSON, such as a file the PUT body came from).
func (q *QueueConfig) UnmarshalJSON(b []byte) error {
	type plain QueueConfig
	if err := json.Unmarshal(b, (*plain)(q)); err != nil {
		return err
	}
	var tags struct {
		Tags *map[string]string `json:"tags"`
	}
	if err := json.Unmarshal(b, &tags); err != nil {
		return err
	}
	if tags.Tags != nil {
		q.Tags = *tags.Tags
	}
	return readNullables(b, &q.DeadLetterQueue, &q.RemovePush)
}

// nullable is a string sent as null when empty.
type nullable string

func (n nullable) MarshalJSON() ([]byte, error) {
	if n == "" {
		return []byte("null"), nil
	}
	return json.Marshal(string(n))
}

func nullableOf(s *string) *nullable {
	if s == nil {
		return nil
	}
	n := nullable(*s)
	return &n
}

// Queue is a queue's name, configuration, timestamps and stats.
type Queue struct {
	Name                     string            `json:"name"`
	VisibilityTimeoutSeconds int               `json:"visibility_timeout_seconds"`
	MaxReceives              int               `json:"max_receives"`
	RetentionSeconds         int               `json:"retention_seconds"`
	DelaySeconds             int               `json:"delay_seconds"`
	DedupWindowSeconds       int               `json:"dedup_window_seconds"`
	MaxDepth                 int64             `json:"max_depth"`
	RetryMinSeconds          int               `json:"retry_min_seconds"`
	RetryMaxSeconds          int               `json:"retry_max_seconds"`
	DeadLetterQueue          *string           `json:"dead_letter_queue"`
	DeadLetterSources        []string          `json:"dead_letter_sources"`
	ReceiveWaitSeconds       int               `json:"receive_wait_seconds"`
	MaxMessageSize           int               `json:"max_message_size"`
	ContentBasedDedup        bool              `json:"content_based_dedup"`
	Tags                     map[string]string `json:"tags"`
	Push                     *Push             `json:"push"`
	CreatedAt                time.Time         `json:"created_at"`
	UpdatedAt                time.Time         `json:"updated_at"`
	Stats                    QueueStats        `json:"stats"`
	// SigningSecret is set only in the answer of the PUT that gave the queue push.
	SigningSecret string `json:"signing_secret,omitempty"`
}

// QueueStats counts a queue's messages at the time of the request.
type QueueStats struct {
	Available        int64 `json:"available"`
	InFlight         int64 `json:"in_flight"`
	Delayed          int64 `json:"delayed"`
	DeadLetters      int64 `json:"dead_letters"`
	OldestAgeSeconds int64 `json:"oldest_age_seconds"`
}

// Page asks for one page of a list: at most Limit items (0: the server's
// default) after the cursor After (a previous page's Next; "" for the first).
type Page struct {
	Limit int
	After string
}

func (p Page) query() url.Values {
	q := url.Values{}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.After != "" {
		q.Set("after", p.After)
	}
	return q
}

// QueueList is one page of queues; Next is nil on the last page.
type QueueList struct {
	Queues []Queue `json:"queues"`
	Next   *string `json:"next"`
}

// Paged is one page of a list: its items and the cursor of the next page
// (nil on the last). Every list type of the package is one.
type Paged[T any] interface {
	Items() ([]T, *string)
}

// All lists every item, page after page, from p (its Limit the size of
// each page, its After where to start) until the last:
// client.All[client.Queue](ctx, client.Page{}, c.ListQueues).
func All[T any, L Paged[T]](ctx context.Context, p Page, list func(context.Context, Page) (L, error)) ([]T, error) {
	var all []T
	for {
		l, err := list(ctx, p)
		if err != nil {
			return nil, err
		}
		items, next := l.Items()
		all = append(all, items...)
		if next == nil {
			return all, nil
		}
		p.After = *next
	}
}

// Items is the page's queues and the cursor of the next page.
func (l *QueueList) Items() ([]Queue, *string) { return l.Queues, l.Next }

func queuePath(name string) string { return "/v1/queues/" + url.PathEscape(name) }

// PutQueue creates the queue or changes the given fields of its
// configuration. created reports whether the answer was 201 (a retry after
// an answer that was lost sees 200 for the queue its first attempt created).
func (c *Client) PutQueue(ctx context.Context, name string, cfg QueueConfig) (q *Queue, created bool, err error) {
	q = &Queue{}
	var status int
	err = c.do(ctx, call{method: http.MethodPut, path: queuePath(name), body: cfg, idempotent: true, status: &status}, q)
	if err != nil {
		return nil, false, err
	}
	return q, status == http.StatusCreated, nil
}

// GetQueue returns the queue's configuration and stats.
func (c *Client) GetQueue(ctx context.Context, name string) (*Queue, error) {
	q := &Queue{}
	if err := c.do(ctx, call{method: http.MethodGet, path: queuePath(name), idempotent: true}, q); err != nil {
		return nil, err
	}
	return q, nil
}

// ListQueues returns one page of the queues, sorted by name.
func (c *Client) ListQueues(ctx context.Context, p Page) (*QueueList, error) {
	l := &QueueList{}
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/queues", query: p.query(), idempotent: true}, l); err != nil {
		return nil, err
	}
	return l, nil
}

// DeleteQueue deletes the queue with its messages and dead letters.
func (c *Client) DeleteQueue(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: queuePath(name), idempotent: true}, nil)
}

// PurgeQueue drops every available, delayed and in-flight message of the
// queue (dead letters and dedup ids are kept).
func (c *Client) PurgeQueue(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: queuePath(name) + "/messages", idempotent: true}, nil)
}

// MoveMessages moves up to limit (0: the server's default, 1000) available
// messages of queue into the queue to, and returns how many moved. It is
// not retried on 503 or network errors (a repeat would move more).
func (c *Client) MoveMessages(ctx context.Context, queue, to string, limit int) (int64, error) {
	var out struct {
		Moved int64 `json:"moved"`
	}
	body := struct {
		To    string `json:"to"`
		Limit int    `json:"limit,omitempty"`
	}{to, limit}
	err := c.do(ctx, call{method: http.MethodPost, path: queuePath(queue) + "/messages/move", body: body}, &out)
	return out.Moved, err
}

// RotateQueueSecret gives the push queue a new signing secret; the old one
// also signs until PreviousSecretExpires.
func (c *Client) RotateQueueSecret(ctx context.Context, queue string) (*SecretRotation, error) {
	return c.rotateSecret(ctx, queuePath(queue))
}

// EnableQueuePush enables push delivery again after it was disabled.
func (c *Client) EnableQueuePush(ctx context.Context, queue string) error {
	return c.enablePush(ctx, queuePath(queue))
}

// ListQueuePushAttempts returns the queue's recorded push attempts.
func (c *Client) ListQueuePushAttempts(ctx context.Context, queue string, a Attempts) ([]PushAttempt, error) {
	return c.listAttempts(ctx, queuePath(queue), a)
}
