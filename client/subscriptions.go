package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// Filter says which events a subscription receives; the zero value (or a
// nil *Filter) lets every event through. See SubscriptionFilter in the spec.
type Filter struct {
	// Types are patterns over dot-separated words: * is one word, # any number.
	Types []string `json:"types,omitempty"`
	// Attributes maps an attribute to its accepted values.
	Attributes map[string][]string `json:"attributes,omitempty"`
	// Data maps a dotted path into the event's data to accepted JSON scalars.
	Data map[string][]any `json:"data,omitempty"`
	// Sources are patterns over the event's CloudEvents source (* is any run).
	Sources []string `json:"sources,omitempty"`
	// Subjects are patterns over its subject, as Sources; an event without
	// a subject matches none.
	Subjects []string `json:"subjects,omitempty"`
}

// SubscriptionConfig is a subscription's configuration as PUT sends it: a
// nil field is left out. Start ("latest", "earliest" or an RFC 3339 time)
// is honoured on creation only.
type SubscriptionConfig struct {
	Filter                   *Filter `json:"filter,omitempty"`
	Ordered                  *bool   `json:"ordered,omitempty"`
	Start                    string  `json:"start,omitempty"`
	VisibilityTimeoutSeconds *int    `json:"visibility_timeout_seconds,omitempty"`
	MaxReceives              *int    `json:"max_receives,omitempty"`
	RetentionSeconds         *int    `json:"retention_seconds,omitempty"`
	RetryMinSeconds          *int    `json:"retry_min_seconds,omitempty"`
	RetryMaxSeconds          *int    `json:"retry_max_seconds,omitempty"`
	// DeadLetterQueue names the queue that takes the dead letters (a
	// pointer to "" clears it).
	DeadLetterQueue *string `json:"-"`
	// Push sets or changes push delivery; RemovePush turns it off.
	Push       *PushConfig `json:"push,omitempty"`
	RemovePush bool        `json:"-"`
}

// MarshalJSON writes the fields set, with "push": null for RemovePush and
// "dead_letter_queue": null for a pointer to "".
func (s SubscriptionConfig) MarshalJSON() ([]byte, error) {
	type plain SubscriptionConfig
	v := struct {
		plain
		DeadLetterQueue *nullable `json:"dead_letter_queue,omitempty"`
	}{plain(s), nullableOf(s.DeadLetterQueue)}
	return withRemovedPush(v, s.RemovePush)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *SubscriptionConfig) UnmarshalJSON(b []byte) error {
	type plain SubscriptionConfig
	if err := json.Unmarshal(b, (*plain)(s)); err != nil {
		return err
	}
	return readNullables(b, &s.DeadLetterQueue, &s.RemovePush)
}

// Subscription is a subscription's configuration and stats.
type Subscription struct {
	Name                     string     `json:"name"`
	Topic                    string     `json:"topic"`
	Filter                   *Filter    `json:"filter"`
	Ordered                  bool       `json:"ordered"`
	VisibilityTimeoutSeconds int        `json:"visibility_timeout_seconds"`
	MaxReceives              int        `json:"max_receives"`
	RetentionSeconds         int        `json:"retention_seconds"`
	RetryMinSeconds          int        `json:"retry_min_seconds"`
	RetryMaxSeconds          int        `json:"retry_max_seconds"`
	DeadLetterQueue          *string    `json:"dead_letter_queue"`
	Push                     *Push      `json:"push"`
	CreatedAt                time.Time  `json:"created_at"`
	UpdatedAt                time.Time  `json:"updated_at"`
	Stats                    QueueStats `json:"stats"`
	// SigningSecret is set only in the answer of the PUT that gave it push.
	SigningSecret string `json:"signing_secret,omitempty"`
}

// SubscriptionList is one page of a topic's subscriptions.
type SubscriptionList struct {
	Subscriptions []Subscription `json:"subscriptions"`
	Next          *string        `json:"next"`
}

// Items is the page's subscriptions and the cursor of the next page.
func (l *SubscriptionList) Items() ([]Subscription, *string) { return l.Subscriptions, l.Next }

// Delivery is an event received from a subscription; ID is the event's.
type Delivery struct {
	ID           string `json:"id"`
	Event        Event  `json:"event"`
	Receipt      string `json:"receipt"`
	ReceiveCount int    `json:"receive_count"`
}

// EventDeadLetter is a subscription's dead letter.
type EventDeadLetter struct {
	ID             string    `json:"id"`
	Event          Event     `json:"event"`
	ReceiveCount   int       `json:"receive_count"`
	LastError      *string   `json:"last_error"`
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
}

// EventDeadLetterPage is one page of a subscription's dead letters.
type EventDeadLetterPage struct {
	Messages []EventDeadLetter `json:"messages"`
	Next     *string           `json:"next"`
}

// Items is the page's dead letters and the cursor of the next page.
func (l *EventDeadLetterPage) Items() ([]EventDeadLetter, *string) { return l.Messages, l.Next }

func subPath(topic, sub string) string {
	return topicPath(topic) + "/subscriptions/" + url.PathEscape(sub)
}

// PutSubscription creates the subscription or changes the given fields;
// created reports a 201.
func (c *Client) PutSubscription(ctx context.Context, topic, sub string, cfg SubscriptionConfig) (s *Subscription, created bool, err error) {
	s = &Subscription{}
	var status int
	err = c.do(ctx, call{method: http.MethodPut, path: subPath(topic, sub), body: cfg, idempotent: true, status: &status}, s)
	if err != nil {
		return nil, false, err
	}
	return s, status == http.StatusCreated, nil
}

// GetSubscription returns the subscription's configuration and stats.
func (c *Client) GetSubscription(ctx context.Context, topic, sub string) (*Subscription, error) {
	s := &Subscription{}
	if err := c.do(ctx, call{method: http.MethodGet, path: subPath(topic, sub), idempotent: true}, s); err != nil {
		return nil, err
	}
	return s, nil
}

// ListSubscriptions returns one page of the topic's subscriptions.
func (c *Client) ListSubscriptions(ctx context.Context, topic string, p Page) (*SubscriptionList, error) {
	l := &SubscriptionList{}
	err := c.do(ctx, call{method: http.MethodGet, path: topicPath(topic) + "/subscriptions", query: p.query(), idempotent: true}, l)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// DeleteSubscription deletes the subscription with its deliveries.
func (c *Client) DeleteSubscription(ctx context.Context, topic, sub string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: subPath(topic, sub), idempotent: true}, nil)
}

// SeekSubscription redelivers (or skips) retained events from to:
// "earliest", "latest" or an RFC 3339 time.
func (c *Client) SeekSubscription(ctx context.Context, topic, sub, to string) error {
	body := map[string]string{"to": to}
	return c.do(ctx, call{method: http.MethodPost, path: subPath(topic, sub) + "/seek", body: body, idempotent: true}, nil)
}

// ReceiveEvents claims deliveries of the subscription, like [Client.Receive].
func (c *Client) ReceiveEvents(ctx context.Context, topic, sub string, r Receive) ([]Delivery, error) {
	var out struct {
		Messages []Delivery `json:"messages"`
	}
	err := c.receive(ctx, subPath(topic, sub), r, &out)
	return out.Messages, err
}

// AckEvents acks the subscription's deliveries whose receipts are current.
func (c *Client) AckEvents(ctx context.Context, topic, sub string, receipts ...string) ([]ReceiptResult, error) {
	return c.ack(ctx, subPath(topic, sub), receipts)
}

// NackEvents releases the subscription's claims as n says.
func (c *Client) NackEvents(ctx context.Context, topic, sub string, n Nack, receipts ...string) ([]ReceiptResult, error) {
	return c.nack(ctx, subPath(topic, sub), n, receipts)
}

// ExtendEvents hides the claimed deliveries for visibility from now.
func (c *Client) ExtendEvents(ctx context.Context, topic, sub string, visibility time.Duration, receipts ...string) ([]ReceiptResult, error) {
	return c.extend(ctx, subPath(topic, sub), visibility, receipts)
}

// ListSubscriptionDeadLetters returns one page of the subscription's dead letters.
func (c *Client) ListSubscriptionDeadLetters(ctx context.Context, topic, sub string, p Page) (*EventDeadLetterPage, error) {
	out := &EventDeadLetterPage{}
	if err := c.listDeadLetters(ctx, subPath(topic, sub), p, out); err != nil {
		return nil, err
	}
	return out, nil
}

// RedriveSubscriptionDeadLetters delivers dead letters again (IDs are
// event ids); retried like [Client.RedriveDeadLetters].
func (c *Client) RedriveSubscriptionDeadLetters(ctx context.Context, topic, sub string, r Redrive) (int64, error) {
	return c.redrive(ctx, subPath(topic, sub), r)
}

// PurgeSubscriptionDeadLetters deletes the subscription's dead letters.
func (c *Client) PurgeSubscriptionDeadLetters(ctx context.Context, topic, sub string) error {
	return c.purgeDeadLetters(ctx, subPath(topic, sub))
}

// PurgeSubscription drops every available, delayed and in-flight message
// of the subscription (dead letters are kept), as [Client.PurgeQueue]
// does for a queue; it needs manage.
func (c *Client) PurgeSubscription(ctx context.Context, topic, sub string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: subPath(topic, sub) + "/messages", idempotent: true}, nil)
}

// RotateSubscriptionSecret gives the push subscription a new signing secret.
func (c *Client) RotateSubscriptionSecret(ctx context.Context, topic, sub string) (*SecretRotation, error) {
	return c.rotateSecret(ctx, subPath(topic, sub))
}

// EnableSubscriptionPush enables push delivery again after it was disabled.
func (c *Client) EnableSubscriptionPush(ctx context.Context, topic, sub string) error {
	return c.enablePush(ctx, subPath(topic, sub))
}

// ListSubscriptionPushAttempts returns the subscription's recorded push attempts.
func (c *Client) ListSubscriptionPushAttempts(ctx context.Context, topic, sub string, a Attempts) ([]PushAttempt, error) {
	return c.listAttempts(ctx, subPath(topic, sub), a)
}

// PeekedDelivery is a subscription's delivery as a peek shows it: no
// receipt; ID is the event's, State as in [PeekedMessage].
type PeekedDelivery struct {
	ID           string    `json:"id"`
	Event        Event     `json:"event"`
	ReceiveCount int       `json:"receive_count"`
	VisibleAt    time.Time `json:"visible_at"`
	State        string    `json:"state"`
}

// PeekedDeliveryPage is one page of a subscription's peek in delivery
// order; Next is nil on the last page.
type PeekedDeliveryPage struct {
	Messages []PeekedDelivery `json:"messages"`
	Next     *string          `json:"next"`
}

// PeekSubscription returns one page of the subscription's unacked
// deliveries without claiming any, like [Client.PeekMessages].
func (c *Client) PeekSubscription(ctx context.Context, topic, sub string, o PeekOptions) (*PeekedDeliveryPage, error) {
	out := &PeekedDeliveryPage{}
	if err := c.peek(ctx, subPath(topic, sub), o, out); err != nil {
		return nil, err
	}
	return out, nil
}
