package handlers

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// Dead letters into another queue (API.md § Work queues): a queue's or a
// subscription's dead_letter_queue, the sources a target lists, and the
// move of available messages from one queue to another.

// deadLetterQueueOf is the store's patch of a request's dead_letter_queue:
// nil when not given, "" for null (none), else the name.
func deadLetterQueueOf(raw rawOf[string]) *string {
	switch {
	case len(raw) == 0:
		return nil
	case string(raw) == jsonNull:
		return new(string)
	}
	var n string
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil
	}
	return &n
}

// checkDeadLetterQueue checks a request's dead_letter_queue: null or a
// queue's name.
func checkDeadLetterQueue(raw rawOf[string]) error {
	if len(raw) == 0 || string(raw) == jsonNull {
		return nil
	}
	n := deadLetterQueueOf(raw)
	if n == nil || !nameRe.MatchString(*n) {
		return invalid("dead_letter_queue", "must be null or a queue's name (matching %s)", nameRe)
	}
	return nil
}

// deadLetterQueueAllowed checks that the request's key may have its queue
// or subscription dead-letter into the queue dlq: a dead-lettering sends
// into that queue, so it needs send there, beyond the route's manage.
func (h *handler) deadLetterQueueAllowed(c echo.Context, dlq *string) error {
	if dlq == nil || *dlq == "" || keyOf(c).Allows(access.Queue, *dlq, access.Send) {
		return nil
	}
	return h.forbidden(access.Permission{Kind: access.Queue, Name: *dlq, Action: access.Send})
}

// nonEmpty is s, or nil when it is "".
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// queueExtras is what a queue's answer adds to its row: its stats and the
// queues and subscriptions whose dead_letter_queue it is.
type queueExtras struct {
	stats   store.QueueStats
	sources []string
}

// queueExtrasGet reads the stats and dead-letter sources of the queues.
func queueExtrasGet(ctx context.Context, db store.DBTX, ids []int64) (map[int64]queueExtras, error) {
	stats, err := store.QueueStatsGet(ctx, db, ids)
	if err != nil {
		return nil, err
	}
	sources, err := store.DeadLetterSources(ctx, db, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]queueExtras, len(ids))
	for _, id := range ids {
		out[id] = queueExtras{stats: stats[id], sources: sources[id]}
	}
	return out, nil
}

// moveRequest is the body of POST /v1/queues/{queue}/messages/move.
type moveRequest struct {
	To    *string `json:"to"`
	Limit *int    `json:"limit"`
}

// Bounds of a move: its default and largest limit.
const (
	moveDefaultLimit = 1000
	moveMaxLimit     = 1_000_000
)

// messageMove moves available messages of the route's queue into the
// queue "to", in send order, in bounded batches (store.MessageMove). It
// needs manage on the route's queue (it takes messages out of it, as a
// purge or a redrive does: checked by the route) and send on "to" (it
// puts messages into it, as a send does).
func (h *handler) messageMove(c echo.Context) error {
	from, err := name(c, "queue")
	if err != nil {
		return err
	}
	var req moveRequest
	if err := h.decode(c, &req, false); err != nil {
		return err
	}
	limit := deref(req.Limit, moveDefaultLimit)
	switch {
	case req.To == nil:
		return invalid("to", "is required: the queue to move the messages into")
	case !nameRe.MatchString(*req.To):
		return invalid("to", "must be a queue's name (matching %s)", nameRe)
	case *req.To == from:
		return invalid("to", "must be another queue than the one the messages are moved from")
	case limit < 1 || limit > moveMaxLimit:
		return invalid("limit", "must be between 1 and %d", moveMaxLimit)
	}
	if !keyOf(c).Allows(access.Queue, *req.To, access.Send) {
		return h.forbidden(access.Permission{Kind: access.Queue, Name: *req.To, Action: access.Send})
	}
	ctx := c.Request().Context()
	moved, err := MessageMove(ctx, h.Pool, h.Notifier, from, *req.To, limit)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, map[string]int{"moved": moved})
}

// MessageMove moves up to limit available messages of the queue from
// into the queue to and reports how many moved: what POST
// /v1/queues/{queue}/messages/move does, for every face. Either queue
// missing is [store.ErrNotFound].
func MessageMove(ctx context.Context, db store.TxBeginner, n *store.Notifier, from, to string, limit int) (int, error) {
	return messageMove(ctx, db, n, from, to, "", limit)
}

// MessageMoveBack is [MessageMove] of only the messages of queue from
// that were dead-lettered from queue to, back into it (SQS's move task
// without a destination).
func MessageMoveBack(ctx context.Context, db store.TxBeginner, n *store.Notifier, from, to string, limit int) (int, error) {
	return messageMove(ctx, db, n, from, to, to, limit)
}

// messageMove is MessageMove of the messages dead-lettered from origin
// ("": all).
func messageMove(ctx context.Context, db store.TxBeginner, n *store.Notifier, from, to, origin string, limit int) (int, error) {
	src, err := store.QueueGet(ctx, db, from)
	if err != nil {
		return 0, err
	}
	dst, err := store.QueueGet(ctx, db, to)
	if err != nil {
		return 0, err
	}
	return store.MessageMoveAndWake(ctx, db, n, store.MoveParams{From: src.ID, To: dst.ID, Limit: limit, Origin: origin})
}
