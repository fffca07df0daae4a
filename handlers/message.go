package handlers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/store"
)

type sendRequest struct {
	Messages []sendItem `json:"messages"`
}

type sendItem struct {
	Body         json.RawMessage   `json:"body"`
	Attributes   map[string]string `json:"attributes"`
	Group        *string           `json:"group"`
	DedupID      *string           `json:"dedup_id"`
	DelaySeconds *int              `json:"delay_seconds"`
	DeliverAt    *string           `json:"deliver_at"`
}

// dateTimeRe is an RFC 3339 date-time as RFC 3339 writes it (a 'T',
// a '.' before the fraction, offsets within 23:59), which deliver_at
// must be: Go's time.Parse takes more (a ',' before the fraction, offsets
// to 24:60), and the SQL API's ferry.send_valid_time holds this pattern.
var dateTimeRe = regexp.MustCompile(`^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`)

// parseDateTime reads s as dateTimeRe spells it, a real day of a year
// from 0001 (PostgreSQL has no year 0).
func parseDateTime(s string) (time.Time, bool) {
	if !dateTimeRe.MatchString(s) || s[:4] == "0000" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

type sendReply struct {
	Messages []sendItemReply `json:"messages"`
}

type sendItemReply struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

// checkBatch checks a request's batch member field (messages, events,
// receipts) of n items, nil when absent: required, not empty, at most
// MaxBatch.
func (h *handler) checkBatch(field string, isNil bool, n int) error {
	switch {
	case isNil:
		return invalid(field, "is required")
	case n == 0:
		return invalid(field, "must not be empty")
	case n > h.limits.MaxBatch:
		return tooLarge("a batch holds at most %d %s, not %d", h.limits.MaxBatch, field, n)
	}
	return nil
}

// toSendMessages validates a send batch and converts it for the store.
func (h *handler) toSendMessages(items []sendItem) ([]store.SendMessage, error) {
	if err := h.checkBatch("messages", items == nil, len(items)); err != nil {
		return nil, err
	}
	var cs checks
	out := make([]store.SendMessage, len(items))
	for i, m := range items {
		f := func(name string) string { return fmt.Sprintf("messages[%d].%s", i, name) }
		if len(m.Body) == 0 {
			cs.add(f("body"), "is required")
			continue
		}
		body, attrs, err := h.payload(&cs, fmt.Sprintf("messages[%d]", i), "body", m.Body, m.Attributes)
		if err != nil {
			return nil, err
		}
		sm := store.SendMessage{Body: body, Attributes: attrs}
		if m.Group != nil {
			if *m.Group == "" || len(*m.Group) > 128 || !safeText(*m.Group) {
				cs.add(f("group"), "must be 1-128 bytes of text")
			}
			sm.Group = *m.Group
		}
		if m.DedupID != nil {
			if *m.DedupID == "" || len(*m.DedupID) > 128 || !safeText(*m.DedupID) {
				cs.add(f("dedup_id"), "must be 1-128 bytes of text")
			}
			sm.DedupID = *m.DedupID
		}
		switch {
		case m.DelaySeconds != nil && m.DeliverAt != nil:
			cs.add(f("deliver_at"), "cannot be combined with delay_seconds")
		case m.DelaySeconds != nil:
			if *m.DelaySeconds < 0 || *m.DelaySeconds > maxRetentionSeconds {
				cs.add(f("delay_seconds"), "must be between 0 and %d", maxRetentionSeconds)
			}
			d := time.Duration(*m.DelaySeconds) * time.Second
			sm.Delay = &d
		case m.DeliverAt != nil:
			at, ok := parseDateTime(*m.DeliverAt)
			if !ok {
				cs.add(f("deliver_at"), "must be an RFC 3339 date-time string, such as 2030-01-02T15:04:05Z")
			}
			sm.DeliverAt = &at
		}
		out[i] = sm
	}
	return out, cs.err()
}

func (h *handler) messageSend(c echo.Context) error {
	n, err := name(c, "queue")
	if err != nil {
		return err
	}
	var req sendRequest
	if err := h.decode(c, &req, false); err != nil {
		return err
	}
	msgs, err := h.toSendMessages(req.Messages)
	if err != nil {
		return err
	}
	if err := h.queueSendRules(c.Request().Context(), n, msgs); err != nil {
		return err
	}
	results, _, err := h.Sender.Send(c.Request().Context(), n, msgs)
	if err != nil {
		return err
	}
	out := sendReply{Messages: make([]sendItemReply, len(results))}
	fresh := 0
	for i, r := range results {
		out.Messages[i] = sendItemReply{ID: store.FormatMessageID(r.ID), Duplicate: r.Duplicate}
		if !r.Duplicate {
			fresh++
		}
	}
	h.Metrics.ObserveSent(n, fresh)
	return reply(c, http.StatusCreated, out)
}

type receiveRequest struct {
	MaxMessages              *int `json:"max_messages"`
	VisibilityTimeoutSeconds *int `json:"visibility_timeout_seconds"`
	WaitSeconds              *int `json:"wait_seconds"`
}

// messageHeadReply is what a queue's message shows first, received or dead.
type messageHeadReply struct {
	ID         string          `json:"id"`
	Body       json.RawMessage `json:"body"`
	Attributes json.RawMessage `json:"attributes"`
	Group      *string         `json:"group"`
	DedupID    *string         `json:"dedup_id"`
}

// emptyObject and jsonNull stand for absent attributes and data in
// replies (constants: a shared json.RawMessage could be changed in place).
const (
	emptyObject = `{}`
	jsonNull    = `null`
)

// headOf is a queue message's head; attributes never set show as {}.
func headOf(id int64, body, attrs json.RawMessage, group, dedupID *string) messageHeadReply {
	if attrs == nil {
		attrs = json.RawMessage(emptyObject)
	}
	return messageHeadReply{ID: store.FormatMessageID(id), Body: body, Attributes: attrs, Group: group, DedupID: dedupID}
}

type receivedMessageReply struct {
	messageHeadReply
	Receipt      string    `json:"receipt"`
	ReceiveCount int       `json:"receive_count"`
	SentAt       time.Time `json:"sent_at"`
}

// subscriptionMessageReply is a subscription's delivery as a consumer receives
// it: its id is the event's id.
type subscriptionMessageReply struct {
	ID           string          `json:"id"`
	Event        json.RawMessage `json:"event"`
	Receipt      string          `json:"receipt"`
	ReceiveCount int             `json:"receive_count"`
}

func (h *handler) messageReceive(c echo.Context) error {
	var req receiveRequest
	ref, err := h.targetBody(c, &req, true)
	if err != nil {
		return err
	}
	var cs checks
	cs.intRange("max_messages", req.MaxMessages, 1, 100)
	cs.intRange("visibility_timeout_seconds", req.VisibilityTimeoutSeconds, 0, maxVisibilitySeconds)
	cs.intRange("wait_seconds", req.WaitSeconds, 0, 20)
	if err := cs.err(); err != nil {
		return err
	}
	ctx := c.Request().Context()
	q, err := h.resolve(ctx, ref, true)
	if err != nil {
		return err
	}
	p := store.ReceiveParams{
		ClaimParams: store.ClaimParams{
			Queue: q,
			Max:   deref(req.MaxMessages, 1),
			// 0 (SQS's VisibilityTimeout 0): each message received is
			// visible again at once, its receive counted; its receipt acks
			// it only until it is received again.
			VisibilityTimeout: time.Duration(deref(req.VisibilityTimeoutSeconds, q.VisibilityTimeoutSeconds)) * time.Second,
		},
		Wait:         time.Duration(deref(req.WaitSeconds, q.ReceiveWaitSeconds)) * time.Second,
		FallbackPoll: h.FallbackPoll,
		Stop:         h.Stop,
		Recheck:      h.keyRecheck(c),
	}
	msgs, dead, err := store.MessageReceive(ctx, h.Pool, h.Notifier, p)
	if err != nil {
		return err
	}
	msgs, undelivered := h.undeliverable(ctx, c, q, msgs)
	dead += undelivered
	h.Metrics.ObserveDeadLettered(ref.label(), dead)
	h.Metrics.ObserveReceived(ref.label(), len(msgs))
	if ref.isSub() {
		out := make([]subscriptionMessageReply, len(msgs))
		for i, m := range msgs {
			out[i] = subscriptionMessageReply{ID: deref(m.EventID, ""), Event: store.CloudDelivery(m.Body, ref.topic), Receipt: m.Receipt.String(), ReceiveCount: m.ReceiveCount}
		}
		return replySubscriptionMessages(c, out)
	}
	out := make([]receivedMessageReply, len(msgs))
	for i, m := range msgs {
		out[i] = receivedMessageReply{
			messageHeadReply: headOf(m.ID, m.Body, m.Attributes, m.Group, m.DedupID),
			Receipt:          m.Receipt.String(),
			ReceiveCount:     m.ReceiveCount,
			SentAt:           m.SentAt.UTC(),
		}
	}
	return replyReceived(c, out)
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// settleRequest is the body of an ack, nack or extend: receipts, and the
// checks of the request's other members.
type settleRequest interface {
	receiptList() []string
	check() error
}

type receiptsRequest struct {
	Receipts []string `json:"receipts"`
}

func (r *receiptsRequest) receiptList() []string { return r.Receipts }
func (r *receiptsRequest) check() error          { return nil }

type nackRequest struct {
	Receipts     []string `json:"receipts"`
	DelaySeconds *int     `json:"delay_seconds"`
	Error        *string  `json:"error"`
	DeadLetter   bool     `json:"dead_letter"`
}

func (r *nackRequest) receiptList() []string { return r.Receipts }

func (r *nackRequest) check() error {
	var cs checks
	cs.intRange("delay_seconds", r.DelaySeconds, 0, maxVisibilitySeconds)
	if r.Error != nil && (len(*r.Error) > 4096 || !safeText(*r.Error)) {
		cs.add("error", "must be at most 4096 bytes of text")
	}
	return cs.err()
}

type extendRequest struct {
	Receipts                 []string `json:"receipts"`
	VisibilityTimeoutSeconds *int     `json:"visibility_timeout_seconds"`
}

func (r *extendRequest) receiptList() []string { return r.Receipts }

func (r *extendRequest) check() error {
	if r.VisibilityTimeoutSeconds == nil {
		return invalid("visibility_timeout_seconds", "is required")
	}
	var cs checks
	cs.intRange("visibility_timeout_seconds", r.VisibilityTimeoutSeconds, 1, maxVisibilitySeconds)
	return cs.err()
}

type receiptReply struct {
	Receipt string `json:"receipt"`
	Status  string `json:"status"`
}

func (h *handler) parseReceipts(raw []string) ([]store.Receipt, error) {
	if err := h.checkBatch("receipts", raw == nil, len(raw)); err != nil {
		return nil, err
	}
	out := make([]store.Receipt, len(raw))
	for i, s := range raw {
		r, err := store.ParseReceipt(s)
		if err != nil {
			return nil, invalid(fmt.Sprintf("receipts[%d]", i), "is not a receipt issued by Ferry")
		}
		out[i] = r
	}
	return out, nil
}

// settle serves an ack, nack or extend: it validates the route and req
// (its receipts, then its other members), resolves the target, runs do
// and answers one result per receipt, in request order.
func (h *handler) settle(c echo.Context, req settleRequest,
	do func(ctx context.Context, ref targetRef, q store.Queue, receipts []store.Receipt) ([]store.ReceiptResult, error)) error {
	ref, err := h.targetBody(c, req, false)
	if err != nil {
		return err
	}
	receipts, err := h.parseReceipts(req.receiptList())
	if err != nil {
		return err
	}
	if err := req.check(); err != nil {
		return err
	}
	ctx := c.Request().Context()
	q, err := h.resolve(ctx, ref, true)
	if err != nil {
		return err
	}
	results, err := do(ctx, ref, q, receipts)
	if err != nil {
		return err
	}
	raw := req.receiptList()
	out := make([]receiptReply, len(results))
	for i, r := range results {
		status := "stale"
		if r.OK {
			status = "ok"
		}
		out[i] = receiptReply{Receipt: raw[i], Status: status}
	}
	return reply(c, http.StatusOK, map[string]any{"results": out})
}

func countOK(results []store.ReceiptResult) (n int) {
	for _, r := range results {
		if r.OK {
			n++
		}
	}
	return n
}

func (h *handler) messageAck(c echo.Context) error {
	var req receiptsRequest
	return h.settle(c, &req, func(ctx context.Context, ref targetRef, q store.Queue, receipts []store.Receipt) ([]store.ReceiptResult, error) {
		results, err := store.MessageAckAndWake(ctx, h.Pool, h.Notifier, q.ID, receipts)
		if err == nil {
			h.Metrics.ObserveAcked(ref.label(), countOK(results))
		}
		return results, err
	})
}

func (h *handler) messageNack(c echo.Context) error {
	var req nackRequest
	return h.settle(c, &req, func(ctx context.Context, ref targetRef, q store.Queue, receipts []store.Receipt) ([]store.ReceiptResult, error) {
		p := store.NackParams{Queue: q, Receipts: receipts, Error: req.Error, DeadLetter: req.DeadLetter}
		if req.DelaySeconds != nil {
			d := time.Duration(*req.DelaySeconds) * time.Second
			p.Delay = &d
		}
		results, dead, err := store.MessageNackAndWake(ctx, h.Pool, h.Notifier, p)
		if err == nil {
			h.Metrics.ObserveNacked(ref.label(), countOK(results))
			h.Metrics.ObserveDeadLettered(ref.label(), dead)
		}
		return results, err
	})
}

func (h *handler) messageExtend(c echo.Context) error {
	var req extendRequest
	return h.settle(c, &req, func(ctx context.Context, _ targetRef, q store.Queue, receipts []store.Receipt) ([]store.ReceiptResult, error) {
		return store.MessageExtend(ctx, h.Pool, q.ID, receipts, time.Duration(*req.VisibilityTimeoutSeconds)*time.Second)
	})
}

func (h *handler) messagePurge(c echo.Context) error {
	return h.purge(c, func(ctx context.Context, q store.Queue) error { return store.MessagePurge(ctx, h.Pool, q.ID) })
}

// queueSendRules applies the named queue's own rules to a valid batch:
// every message within its max_message_size (the JSON encoding of body
// and attributes, as the server's limit counts it; 413 over it), and,
// with content_based_dedup, a dedup_id for each message without one
// ([ContentDedupID] of its [BodyText]). The queue's settings come from
// the queue cache, so a change reaches them within its lifetime (1 s).
func (h *handler) queueSendRules(ctx context.Context, name string, msgs []store.SendMessage) error {
	q, err := h.queues.Get(ctx, h.Pool, name)
	if err != nil {
		return err
	}
	for i := range msgs {
		m := &msgs[i]
		if size := storedSize(m.Body) + int64(len(m.Attributes)); q.MaxMessageSize > 0 && size > int64(q.MaxMessageSize) {
			return tooLarge("messages[%d]: body and attributes are %d bytes; the queue's max_message_size is %d", i, size, q.MaxMessageSize)
		}
		if q.ContentBasedDedup && m.DedupID == "" {
			m.DedupID = ContentDedupID(BodyText(m.Body))
		}
	}
	return nil
}

// BodyText is a message's body as text, as the SQS face answers it: a
// JSON string's value, any other JSON value's compact text.
func BodyText(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// ContentDedupID is the dedup id a queue with content_based_dedup gives a
// message sent without one: the hex SHA-256 of its body's text
// ([BodyText]), as SQS's content-based deduplication.
func ContentDedupID(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}
