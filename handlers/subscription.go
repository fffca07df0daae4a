package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// subscriptionRequest is the body of PUT
// /v1/topics/{topic}/subscriptions/{sub}; every field optional.
type subscriptionRequest struct {
	Filter                   rawOf[store.Filter] `json:"filter"`
	Ordered                  *bool               `json:"ordered"`
	Start                    *string             `json:"start"`
	VisibilityTimeoutSeconds *int                `json:"visibility_timeout_seconds"`
	MaxReceives              *int                `json:"max_receives"`
	RetentionSeconds         *int                `json:"retention_seconds"`
	RetryMinSeconds          *int                `json:"retry_min_seconds"`
	RetryMaxSeconds          *int                `json:"retry_max_seconds"`
	DeadLetterQueue          rawOf[string]       `json:"dead_letter_queue"`
	Push                     rawOf[pushRequest]  `json:"push"`
}

// subscriptionReply is a subscription as clients see it.
type subscriptionReply struct {
	Name                     string          `json:"name"`
	Topic                    string          `json:"topic"`
	Filter                   json.RawMessage `json:"filter"`
	Ordered                  bool            `json:"ordered"`
	VisibilityTimeoutSeconds int             `json:"visibility_timeout_seconds"`
	MaxReceives              int             `json:"max_receives"`
	RetentionSeconds         int             `json:"retention_seconds"`
	RetryMinSeconds          int             `json:"retry_min_seconds"`
	RetryMaxSeconds          int             `json:"retry_max_seconds"`
	DeadLetterQueue          *string         `json:"dead_letter_queue"`
	Push                     *pushReply      `json:"push"`
	CreatedAt                time.Time       `json:"created_at"`
	UpdatedAt                time.Time       `json:"updated_at"`
	Stats                    statsReply      `json:"stats"`
}

// toSubscriptionResponse is s of topic with its stats st, its push URL
// whole or masked (toPushResponse).
func toSubscriptionResponse(topic string, s store.Subscription, st store.QueueStats, wholePush bool) subscriptionReply {
	filter := json.RawMessage(s.Filter.JSON())
	if filter == nil {
		filter = json.RawMessage(jsonNull)
	}
	return subscriptionReply{
		Name:                     s.Name,
		Topic:                    topic,
		Filter:                   filter,
		Ordered:                  s.Ordered,
		VisibilityTimeoutSeconds: s.VisibilityTimeoutSeconds,
		MaxReceives:              s.MaxReceives,
		RetentionSeconds:         s.RetentionSeconds,
		RetryMinSeconds:          s.RetryMinSeconds,
		RetryMaxSeconds:          s.RetryMaxSeconds,
		DeadLetterQueue:          nonEmpty(s.DeadLetterQueue),
		Push:                     toPushResponse(s.Queue, wholePush),
		CreatedAt:                s.CreatedAt.UTC(),
		UpdatedAt:                s.UpdatedAt.UTC(),
		Stats:                    statsReply(st),
	}
}

// parseStart reads a start position: "latest", "earliest" or an RFC 3339
// time (inclusive).
func parseStart(field, v string) (store.StartPosition, error) {
	switch v {
	case "latest":
		return store.StartPosition{}, nil
	case "earliest":
		return store.StartPosition{Earliest: true}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return store.StartPosition{}, invalid(field, `must be "latest", "earliest" or an RFC 3339 time`)
	}
	return store.StartPosition{Time: &t}, nil
}

func (h *handler) subscriptionPut(c echo.Context) error {
	ref, err := targetOf(c)
	if err != nil {
		return err
	}
	var req subscriptionRequest
	if err := h.decode(c, &req, true); err != nil {
		return err
	}
	p, err := req.patch()
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if err := h.deadLetterQueueAllowed(c, p.Queue.DeadLetterQueue); err != nil {
		return err
	}
	if p.Queue.Push, err = h.pushPatch(c, json.RawMessage(req.Push)); err != nil {
		return err
	}
	t, err := store.TopicGet(ctx, h.Pool, ref.topic)
	if err != nil {
		return err
	}
	s, created, backfilled, err := store.SubscriptionUpsert(ctx, h.Pool, t, ref.sub, p)
	h.subs.Forget(store.SubscriptionKey(t.ID, ref.sub))
	if err != nil {
		return h.upsertError(c, err)
	}
	h.upserted(ctx, s.Queue, p.Wakes(s, created, backfilled))
	out, err := subscriptionView(c, t.Name).one(ctx, h.Pool, s)
	if err != nil {
		return err
	}
	return secretReply(c, putStatus(created), out, s.IssuedSecret)
}

// patch checks the request and makes the store's patch of it (push
// aside: see pushPatch).
func (r subscriptionRequest) patch() (store.SubscriptionPatch, error) {
	p := store.SubscriptionPatch{
		Queue: store.QueuePatch{
			VisibilityTimeoutSeconds: r.VisibilityTimeoutSeconds,
			MaxReceives:              r.MaxReceives,
			RetentionSeconds:         r.RetentionSeconds,
			RetryMinSeconds:          r.RetryMinSeconds,
			RetryMaxSeconds:          r.RetryMaxSeconds,
			DeadLetterQueue:          deadLetterQueueOf(r.DeadLetterQueue),
		},
		Ordered: r.Ordered,
	}
	if err := checkDeadLetterQueue(r.DeadLetterQueue); err != nil {
		return p, err
	}
	if err := checkQueueSettings(p.Queue); err != nil {
		return p, err
	}
	var err error
	if r.Filter != nil {
		if p.Filter, err = store.ParseFilter([]byte(r.Filter)); err != nil {
			return p, err
		}
	}
	if r.Start != nil {
		// Honoured on creation only: a repeated PUT of the same body (as
		// declarative tools send) must not fail or rewind.
		if p.Start, err = parseStart("start", *r.Start); err != nil {
			return p, err
		}
	}
	return p, nil
}

func (h *handler) subscriptionGet(c echo.Context) error {
	ref, err := targetOf(c)
	if err != nil {
		return err
	}
	return subscriptionView(c, ref.topic).get(c, h.Pool, func(ctx context.Context) (store.Subscription, error) {
		return h.subscription(ctx, ref.topic, ref.sub, false)
	})
}

// subscriptionList answers one page of the topic's subscriptions; stats
// are computed for that page only.
func (h *handler) subscriptionList(c echo.Context) error {
	topic, err := name(c, "topic")
	if err != nil {
		return err
	}
	var t *store.Topic // read once, however many pages filtering reads
	name := func(s store.Subscription) string { return s.Name }
	return subscriptionView(c, topic).list(c, h.Pool, "subscriptions", readable(mayRead(c, access.Subscription, topic), name, func(ctx context.Context, p listPage) ([]store.Subscription, bool, error) {
		if t == nil {
			got, err := store.TopicGet(ctx, h.Pool, topic)
			if err != nil {
				return nil, false, err
			}
			t = &got
		}
		return store.SubscriptionList(ctx, h.Pool, store.SubscriptionListParams{TopicID: t.ID, After: p.after, Limit: p.limit})
	}))
}

// subscriptionDelete removes the subscription at once; its deliveries and
// dead letters are deleted in bounded batches by a River job inserted in
// the same transaction.
func (h *handler) subscriptionDelete(c echo.Context) error {
	ref, err := targetOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	t, err := store.TopicGet(ctx, h.Pool, ref.topic)
	if err != nil {
		return err
	}
	err = h.deleteAndClean(ctx, func(tx pgx.Tx) ([]int64, int64, error) {
		id, err := store.SubscriptionDelete(ctx, tx, t.ID, ref.sub)
		return []int64{id}, 0, err
	})
	h.subs.Forget(store.SubscriptionKey(t.ID, ref.sub))
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

type seekRequest struct {
	To *string `json:"to"`
}

// subscriptionSeek redelivers (or skips) retained events from a point.
func (h *handler) subscriptionSeek(c echo.Context) error {
	var req seekRequest
	ref, err := h.targetBody(c, &req, false)
	if err != nil {
		return err
	}
	if req.To == nil {
		return invalid("to", "is required")
	}
	start, err := parseStart("to", *req.To)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	s, err := h.subscription(ctx, ref.topic, ref.sub, false)
	if err != nil {
		return err
	}
	if _, err := store.SubscriptionSeekAndWake(ctx, h.SessionPool, h.Notifier, s, start); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// subscriptionView answers subscriptions of the named topic with their
// stats to the request's key, which sees the push URL whole of those it
// may manage only.
func subscriptionView(c echo.Context, topic string) view[store.Subscription, store.QueueStats, subscriptionReply] {
	manage := mayManage(c, access.Subscription, topic)
	return view[store.Subscription, store.QueueStats, subscriptionReply]{
		key:  func(s store.Subscription) (int64, string) { return s.ID, s.Name },
		read: store.QueueStatsGet,
		out: func(s store.Subscription, st store.QueueStats) subscriptionReply {
			return toSubscriptionResponse(topic, s, st, manage(s.Name))
		},
	}
}
