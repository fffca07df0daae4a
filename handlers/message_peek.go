package handlers

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/store"
)

// peekedMessageReply is a queue's message as a peek shows it: no receipt.
type peekedMessageReply struct {
	messageHeadReply
	ReceiveCount int       `json:"receive_count"`
	SentAt       time.Time `json:"sent_at"`
	VisibleAt    time.Time `json:"visible_at"`
	State        string    `json:"state"`
}

// subscriptionPeekedReply is a subscription's delivery as a peek shows
// it: its id is the event's id.
type subscriptionPeekedReply struct {
	ID           string          `json:"id"`
	Event        json.RawMessage `json:"event"`
	ReceiveCount int             `json:"receive_count"`
	VisibleAt    time.Time       `json:"visible_at"`
	State        string          `json:"state"`
}

// peekStates are the values of a peek's state parameter.
var peekStates = []string{store.StateAvailable, store.StateInFlight, store.StateDelayed} //nolint:gochecknoglobals // a read-only list

// messagePeek answers GET .../messages on a queue or subscription: a page
// of its unacked messages in send order, without claiming any (API.md §
// Work queues, peek). It needs receive, as the bodies are the data.
func (h *handler) messagePeek(c echo.Context) error {
	ref, err := targetOf(c)
	if err != nil {
		return err
	}
	p := store.PeekParams{}
	if p.Limit, err = limitOf(c); err != nil {
		return err
	}
	if p.After, err = messageCursor(c); err != nil {
		return err
	}
	if s, ok := c.QueryParams()["state"]; ok {
		if !slices.Contains(peekStates, s[0]) {
			return invalid("state", "must be available, in_flight or delayed")
		}
		p.State = s[0]
	}
	ctx := c.Request().Context()
	q, err := h.resolve(ctx, ref, false)
	if err != nil {
		return err
	}
	p.QueueID = q.ID
	msgs, more, err := store.MessagePeek(ctx, h.Pool, p)
	if err != nil {
		return err
	}
	var next *string
	if more && len(msgs) > 0 {
		s := store.FormatMessageID(msgs[len(msgs)-1].ID)
		next = &s
	}
	if ref.isSub() {
		return reply(c, http.StatusOK, map[string]any{"messages": h.subscriptionPeeked(c, ref.topic, msgs), "next": next})
	}
	return reply(c, http.StatusOK, map[string]any{"messages": h.queuePeeked(c, msgs), "next": next})
}

// messageCursor reads a message list's after parameter: 0 when absent.
func messageCursor(c echo.Context) (int64, error) {
	s, ok := c.QueryParams()["after"]
	if !ok {
		return 0, nil
	}
	id, ok := store.ParseMessageID(s[0])
	if !ok {
		return 0, invalid("after", "is not a cursor issued by Ferry")
	}
	return id, nil
}

func (h *handler) queuePeeked(c echo.Context, msgs []store.PeekedMessage) []peekedMessageReply {
	out := make([]peekedMessageReply, len(msgs))
	for i, m := range msgs {
		out[i] = peekedMessageReply{
			messageHeadReply: headOf(m.ID, h.carriedOr(c, m.Body, jsonNull, peekedName(m.ID, "body")),
				h.carriedOr(c, m.Attributes, emptyObject, peekedName(m.ID, "attributes")), m.Group, m.DedupID),
			ReceiveCount: m.ReceiveCount, SentAt: m.SentAt.UTC(), VisibleAt: m.VisibleAt.UTC(), State: m.State,
		}
	}
	return out
}

func (h *handler) subscriptionPeeked(c echo.Context, topic string, msgs []store.PeekedMessage) []subscriptionPeekedReply {
	out := make([]subscriptionPeekedReply, len(msgs))
	for i, m := range msgs {
		out[i] = subscriptionPeekedReply{
			ID: deref(m.EventID, ""), Event: h.carriedEvent(c, topic, m.Body, peekedName(m.ID, "event")),
			ReceiveCount: m.ReceiveCount, VisibleAt: m.VisibleAt.UTC(), State: m.State,
		}
	}
	return out
}

// peekedName names a peeked message's stored value for the log.
func peekedName(id int64, what string) func() string {
	return func() string { return "message " + store.FormatMessageID(id) + " " + what }
}
