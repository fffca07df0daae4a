package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/store"
)

type deadLetterReply struct {
	messageHeadReply
	ReceiveCount   int       `json:"receive_count"`
	LastError      *string   `json:"last_error"`
	SentAt         time.Time `json:"sent_at"`
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
}

// subscriptionDeadLetterReply is a subscription's dead letter: its id is the
// event's id.
type subscriptionDeadLetterReply struct {
	ID             string          `json:"id"`
	Event          json.RawMessage `json:"event"`
	ReceiveCount   int             `json:"receive_count"`
	LastError      *string         `json:"last_error"`
	DeadLetteredAt time.Time       `json:"dead_lettered_at"`
}

func (h *handler) deadLetterList(c echo.Context) error {
	ref, err := targetOf(c)
	if err != nil {
		return err
	}
	limit, err := limitOf(c)
	if err != nil {
		return err
	}
	var after int64
	if s, ok := c.QueryParams()["after"]; ok {
		id, ok := store.ParseMessageID(s[0])
		if !ok {
			return invalid("after", "is not a cursor issued by Ferry")
		}
		after = id
	}
	ctx := c.Request().Context()
	q, err := h.resolve(ctx, ref, false)
	if err != nil {
		return err
	}
	dls, more, err := store.DeadLetterList(ctx, h.Pool, q.ID, after, int(limit))
	if err != nil {
		return err
	}
	var next *string
	if more && len(dls) > 0 {
		s := store.FormatMessageID(dls[len(dls)-1].ID)
		next = &s
	}
	if ref.isSub() {
		out := make([]subscriptionDeadLetterReply, len(dls))
		for i, d := range dls {
			out[i] = subscriptionDeadLetterReply{
				ID: deref(d.EventID, ""), Event: h.carriedEvent(c, ref.topic, d.Body, deadLetterName(d.ID, "event")),
				ReceiveCount: d.ReceiveCount, LastError: d.LastError,
				DeadLetteredAt: d.DeadLetteredAt.UTC(),
			}
		}
		return reply(c, http.StatusOK, map[string]any{"messages": out, "next": next})
	}
	out := make([]deadLetterReply, len(dls))
	for i, d := range dls {
		out[i] = deadLetterReply{
			messageHeadReply: headOf(d.ID, h.carriedOr(c, d.Body, jsonNull, deadLetterName(d.ID, "body")),
				h.carriedOr(c, d.Attributes, emptyObject, deadLetterName(d.ID, "attributes")), d.Group, d.DedupID),
			ReceiveCount: d.ReceiveCount, LastError: d.LastError, SentAt: d.SentAt.UTC(), DeadLetteredAt: d.DeadLetteredAt.UTC(),
		}
	}
	return reply(c, http.StatusOK, map[string]any{"messages": out, "next": next})
}

// deadLetterName names a dead letter's stored value for the log.
func deadLetterName(id int64, what string) func() string {
	return func() string { return "dead letter " + store.FormatMessageID(id) + " " + what }
}

type redriveRequest struct {
	IDs   []string `json:"ids"`
	Limit *int     `json:"limit"`
}

func (h *handler) deadLetterRedrive(c echo.Context) error {
	var req redriveRequest
	ref, err := h.targetBody(c, &req, false)
	if err != nil {
		return err
	}
	switch {
	case req.IDs != nil && req.Limit != nil:
		return invalid("ids", "give either ids or limit, not both")
	case req.IDs == nil && req.Limit == nil:
		return invalid("ids", "give ids or limit")
	case req.IDs != nil && len(req.IDs) == 0:
		return invalid("ids", "must not be empty")
	case len(req.IDs) > h.limits.MaxBatch:
		return tooLarge("at most %d ids, not %d", h.limits.MaxBatch, len(req.IDs))
	case req.Limit != nil && (*req.Limit < 1 || *req.Limit > 10000):
		return invalid("limit", "must be between 1 and 10000")
	}
	ctx := c.Request().Context()
	q, err := h.resolve(ctx, ref, false)
	if err != nil {
		return err
	}
	p := store.RedriveParams{QueueID: q.ID, Limit: deref(req.Limit, 0)}
	if req.IDs != nil {
		p.IDs = make([]int64, 0, len(req.IDs))
		for i, s := range req.IDs {
			if len(s) == 0 || len(s) > 256 || !safeText(s) {
				return invalid(fmt.Sprintf("ids[%d]", i), "must be 1-256 characters")
			}
			if ref.isSub() {
				continue // event ids
			}
			// An id Ferry never issued names no dead letter: not redriven.
			if id, ok := store.ParseMessageID(s); ok {
				p.IDs = append(p.IDs, id)
			}
		}
		if ref.isSub() {
			p.IDs, p.EventIDs = nil, req.IDs
		}
	}
	redriven, err := store.DeadLetterRedriveAndWake(ctx, h.Pool, h.Notifier, p)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, map[string]int{"redriven": redriven})
}

func (h *handler) deadLetterPurge(c echo.Context) error {
	return h.purge(c, func(ctx context.Context, q store.Queue) error { return store.DeadLetterPurge(ctx, h.Pool, q.ID) })
}
