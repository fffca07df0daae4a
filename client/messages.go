package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// SendMessage is one message to send. Body is encoded with encoding/json
// (a json.RawMessage is sent as is). DelaySeconds and DeliverAt exclude each
// other.
type SendMessage struct {
	Body         any               `json:"body"`
	Attributes   map[string]string `json:"attributes,omitempty"`
	Group        string            `json:"group,omitempty"`
	DedupID      string            `json:"dedup_id,omitempty"`
	DelaySeconds *int              `json:"delay_seconds,omitempty"`
	DeliverAt    *time.Time        `json:"deliver_at,omitempty"`
}

// Sent is the result of one sent message: its id, and whether it was a
// duplicate of a message sent earlier with the same dedup id.
type Sent struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

// Message is a received message. Receipt names this claim: pass it to
// [Client.Ack], [Client.Nack] or [Client.Extend].
type Message struct {
	ID           string            `json:"id"`
	Body         json.RawMessage   `json:"body"`
	Attributes   map[string]string `json:"attributes"`
	Group        *string           `json:"group"`
	DedupID      *string           `json:"dedup_id"`
	Receipt      string            `json:"receipt"`
	ReceiveCount int               `json:"receive_count"`
	SentAt       time.Time         `json:"sent_at"`
}

// Send sends one message; see [Client.SendBatch].
func (c *Client) Send(ctx context.Context, queue string, m SendMessage) (Sent, error) {
	res, err := c.SendBatch(ctx, queue, []SendMessage{m})
	if err != nil {
		return Sent{}, err
	}
	return res[0], nil
}

// SendBatch sends 1 to 1000 messages all-or-nothing and returns one result
// per message, in order. It is retried on 429 (queue_full: nothing was
// written), and on 503 and network errors only when every message has a
// DedupID.
func (c *Client) SendBatch(ctx context.Context, queue string, ms []SendMessage) ([]Sent, error) {
	deduped := len(ms) > 0
	for _, m := range ms {
		deduped = deduped && m.DedupID != ""
	}
	var out struct {
		Messages []Sent `json:"messages"`
	}
	body := struct {
		Messages []SendMessage `json:"messages"`
	}{ms}
	err := c.do(ctx, call{method: http.MethodPost, path: queuePath(queue) + "/messages", body: body, idempotent: deduped}, &out)
	return out.Messages, err
}

// Receive asks for messages; the zero value claims one, at once, for the
// queue's visibility timeout.
type Receive struct {
	// MaxMessages is the most to claim (1 to 100; 0 means 1).
	MaxMessages int `json:"max_messages,omitempty"`
	// VisibilityTimeoutSeconds overrides the queue's (0: the queue's).
	VisibilityTimeoutSeconds int `json:"visibility_timeout_seconds,omitempty"`
	// WaitSeconds long-polls up to this long (0 to 20) when none is available
	// (0: the queue's receive_wait_seconds).
	WaitSeconds int `json:"wait_seconds,omitempty"`
	// NoWait answers at once even when the queue has a receive_wait_seconds
	// (it sends wait_seconds 0; WaitSeconds is then ignored).
	NoWait bool `json:"-"`
	// Visible receives the messages and leaves them visible at once, as
	// SQS's VisibilityTimeout 0 does (it sends visibility_timeout_seconds
	// 0; VisibilityTimeoutSeconds is then ignored). Their receipts are
	// stale at once for a nack or an extend; an ack deletes the message
	// until it is received again.
	Visible bool `json:"-"`
}

// receiveWire is a Receive as sent: the zero that NoWait and Visible
// stand for is written, every other zero left out.
type receiveWire struct {
	MaxMessages              int  `json:"max_messages,omitempty"`
	VisibilityTimeoutSeconds *int `json:"visibility_timeout_seconds,omitempty"`
	WaitSeconds              *int `json:"wait_seconds,omitempty"`
}

// setOrZero is &v when v is set, a pointer to 0 when zero says so, or nil.
func setOrZero(v int, zero bool) *int {
	switch {
	case zero:
		return new(int)
	case v != 0:
		return &v
	}
	return nil
}

// MarshalJSON writes the fields set, and 0 for NoWait and Visible.
func (r Receive) MarshalJSON() ([]byte, error) {
	return json.Marshal(receiveWire{
		MaxMessages:              r.MaxMessages,
		VisibilityTimeoutSeconds: setOrZero(r.VisibilityTimeoutSeconds, r.Visible),
		WaitSeconds:              setOrZero(r.WaitSeconds, r.NoWait),
	})
}

// UnmarshalJSON reads what MarshalJSON writes: "wait_seconds": 0 is
// NoWait, "visibility_timeout_seconds": 0 is Visible.
func (r *Receive) UnmarshalJSON(b []byte) error {
	var v receiveWire
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Receive{MaxMessages: v.MaxMessages}
	if v.WaitSeconds != nil {
		r.WaitSeconds, r.NoWait = *v.WaitSeconds, *v.WaitSeconds == 0
	}
	if v.VisibilityTimeoutSeconds != nil {
		r.VisibilityTimeoutSeconds, r.Visible = *v.VisibilityTimeoutSeconds, *v.VisibilityTimeoutSeconds == 0
	}
	return nil
}

// Receive claims up to r.MaxMessages messages; an empty slice when none was
// available within r.WaitSeconds.
func (c *Client) Receive(ctx context.Context, queue string, r Receive) ([]Message, error) {
	var out struct {
		Messages []Message `json:"messages"`
	}
	err := c.receive(ctx, queuePath(queue), r, &out)
	return out.Messages, err
}

// receive claims messages of the queue or subscription at base.
func (c *Client) receive(ctx context.Context, base string, r Receive, out any) error {
	return c.do(ctx, call{method: http.MethodPost, path: base + "/receive", body: r, idempotent: true}, out)
}

// ReceiptResult says what an ack, nack or extend did with one receipt:
// Status "ok", or "stale" when the receipt no longer names the message's
// current claim (nothing changed).
type ReceiptResult struct {
	Receipt string `json:"receipt"`
	Status  string `json:"status"`
}

// Nack says how to release claims: after DelaySeconds (nil: the queue's
// backoff), keeping Error as the message's last error, or, with DeadLetter,
// moving them to the dead letters at once.
type Nack struct {
	DelaySeconds *int   `json:"delay_seconds,omitempty"`
	Error        string `json:"error,omitempty"`
	DeadLetter   bool   `json:"dead_letter,omitempty"`
}

type receiptResults struct {
	Results []ReceiptResult `json:"results"`
}

// Ack deletes the messages whose receipts are current claims.
func (c *Client) Ack(ctx context.Context, queue string, receipts ...string) ([]ReceiptResult, error) {
	return c.ack(ctx, queuePath(queue), receipts)
}

// Nack releases the claims as n says.
func (c *Client) Nack(ctx context.Context, queue string, n Nack, receipts ...string) ([]ReceiptResult, error) {
	return c.nack(ctx, queuePath(queue), n, receipts)
}

// Extend hides the claimed messages for visibility (whole seconds, at
// least 1) counted from now.
func (c *Client) Extend(ctx context.Context, queue string, visibility time.Duration, receipts ...string) ([]ReceiptResult, error) {
	return c.extend(ctx, queuePath(queue), visibility, receipts)
}

// receipts posts body to base+verb (ack, nack, extend: idempotent, a
// repeat names a receipt already used).
func (c *Client) receipts(ctx context.Context, base, verb string, body any) ([]ReceiptResult, error) {
	var out receiptResults
	err := c.do(ctx, call{method: http.MethodPost, path: base + "/" + verb, body: body, idempotent: true}, &out)
	return out.Results, err
}

func (c *Client) ack(ctx context.Context, base string, receipts []string) ([]ReceiptResult, error) {
	return c.receipts(ctx, base, "ack", map[string]any{"receipts": receipts})
}

func (c *Client) nack(ctx context.Context, base string, n Nack, receipts []string) ([]ReceiptResult, error) {
	body := struct {
		Receipts []string `json:"receipts"`
		Nack
	}{receipts, n}
	return c.receipts(ctx, base, "nack", body)
}

func (c *Client) extend(ctx context.Context, base string, visibility time.Duration, receipts []string) ([]ReceiptResult, error) {
	return c.receipts(ctx, base, "extend", map[string]any{"receipts": receipts, "visibility_timeout_seconds": seconds(visibility)})
}

// seconds rounds d up to whole seconds, at least 1.
func seconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// PeekOptions asks for one page of a peek: at most Limit messages (0: the
// server's default) after the cursor After (a previous page's Next; "" for
// the first), only those in State ("available", "in_flight", "delayed"; ""
// for every state).
type PeekOptions struct {
	Limit int
	After string
	State string
}

func (o PeekOptions) query() url.Values {
	q := Page{Limit: o.Limit, After: o.After}.query()
	if o.State != "" {
		q.Set("state", o.State)
	}
	return q
}

// PeekedMessage is a queue's message as a peek shows it: no receipt, and
// State one of "available", "in_flight", "delayed". VisibleAt is a delayed
// message's delivery time or an in-flight message's lease end.
type PeekedMessage struct {
	ID           string            `json:"id"`
	Body         json.RawMessage   `json:"body"`
	Attributes   map[string]string `json:"attributes"`
	Group        *string           `json:"group"`
	DedupID      *string           `json:"dedup_id"`
	ReceiveCount int               `json:"receive_count"`
	SentAt       time.Time         `json:"sent_at"`
	VisibleAt    time.Time         `json:"visible_at"`
	State        string            `json:"state"`
}

// PeekedMessagePage is one page of a peek in send order; Next is nil on
// the last page.
type PeekedMessagePage struct {
	Messages []PeekedMessage `json:"messages"`
	Next     *string         `json:"next"`
}

// PeekMessages returns one page of the queue's unacked messages without
// claiming any: no receive is counted and no lease changes.
func (c *Client) PeekMessages(ctx context.Context, queue string, o PeekOptions) (*PeekedMessagePage, error) {
	out := &PeekedMessagePage{}
	if err := c.peek(ctx, queuePath(queue), o, out); err != nil {
		return nil, err
	}
	return out, nil
}

// peek gets one page of the messages of the queue or subscription at base.
func (c *Client) peek(ctx context.Context, base string, o PeekOptions, out any) error {
	return c.do(ctx, call{method: http.MethodGet, path: base + "/messages", query: o.query(), idempotent: true}, out)
}
