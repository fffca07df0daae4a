package handlers

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/jobs"
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
	Push                     rawOf[pushRequest]  `json:"push"`
}

// subscriptionResponse is a subscription as clients see it.
type subscriptionResponse struct {
	Name                     string          `json:"name"`
	Topic                    string          `json:"topic"`
	Filter                   json.RawMessage `json:"filter"`
	Ordered                  bool            `json:"ordered"`
	VisibilityTimeoutSeconds int             `json:"visibility_timeout_seconds"`
	MaxReceives              int             `json:"max_receives"`
	RetentionSeconds         int             `json:"retention_seconds"`
	RetryMinSeconds          int             `json:"retry_min_seconds"`
	RetryMaxSeconds          int             `json:"retry_max_seconds"`
	Push                     *pushResponse   `json:"push"`
	CreatedAt                time.Time       `json:"created_at"`
	UpdatedAt                time.Time       `json:"updated_at"`
	Stats                    statsReply      `json:"stats"`
}

func toSubscriptionResponse(topic string, s store.Subscription, st store.QueueStats) subscriptionResponse {
	filter := json.RawMessage(s.Filter.JSON())
	if filter == nil {
		filter = jsonNull
	}
	return subscriptionResponse{
		Name:                     s.Name,
		Topic:                    topic,
		Filter:                   filter,
		Ordered:                  s.Ordered,
		VisibilityTimeoutSeconds: s.VisibilityTimeoutSeconds,
		MaxReceives:              s.MaxReceives,
		RetentionSeconds:         s.RetentionSeconds,
		RetryMinSeconds:          s.RetryMinSeconds,
		RetryMaxSeconds:          s.RetryMaxSeconds,
		Push:                     toPushResponse(s.Queue),
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
	var cs checks
	cs.intRange("visibility_timeout_seconds", req.VisibilityTimeoutSeconds, 1, maxVisibilitySeconds)
	cs.intRange("max_receives", req.MaxReceives, 1, maxReceivesLimit)
	cs.intRange("retention_seconds", req.RetentionSeconds, minRetentionSeconds, maxRetentionSeconds)
	cs.intRange("retry_min_seconds", req.RetryMinSeconds, 0, maxVisibilitySeconds)
	cs.intRange("retry_max_seconds", req.RetryMaxSeconds, 0, maxVisibilitySeconds)
	if err := cs.err(); err != nil {
		return err
	}
	p := store.SubscriptionPatch{
		Queue: store.QueuePatch{
			VisibilityTimeoutSeconds: req.VisibilityTimeoutSeconds,
			MaxReceives:              req.MaxReceives,
			RetentionSeconds:         req.RetentionSeconds,
			RetryMinSeconds:          req.RetryMinSeconds,
			RetryMaxSeconds:          req.RetryMaxSeconds,
		},
		Ordered: req.Ordered,
	}
	if req.Filter != nil {
		if p.Filter, err = store.ParseFilter([]byte(req.Filter)); err != nil {
			return err
		}
	}
	if req.Start != nil {
		// Honoured on creation only: a repeated PUT of the same body (as
		// declarative tools send) must not fail or rewind.
		if p.Start, err = parseStart("start", *req.Start); err != nil {
			return err
		}
	}
	ctx := c.Request().Context()
	if p.Queue.Push, err = h.pushPatch(ctx, json.RawMessage(req.Push)); err != nil {
		return err
	}
	t, err := store.TopicGet(ctx, h.Pool, ref.topic)
	if err != nil {
		return err
	}
	s, created, _, err := store.SubscriptionUpsert(ctx, h.Pool, t, ref.sub, p)
	h.subs.Forget(store.SubscriptionKey(t.ID, ref.sub))
	if err != nil {
		return err
	}
	if p.Queue.Push != nil {
		h.pushChanged(s.ID)
		if h.Pusher != nil {
			h.Pusher.Forget()
			h.kickPush(ctx, s.Queue)
		}
	}
	stats, err := store.QueueStatsGet(ctx, h.Pool, []int64{s.ID})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		if stats[s.ID].Available > 0 {
			h.Notifier.Published([]int64{s.ID}) // backfilled
		}
	}
	return secretReply(c, status, toSubscriptionResponse(t.Name, s, stats[s.ID]), s.IssuedSecret)
}

func (h *handler) subscriptionGet(c echo.Context) error {
	ref, err := targetOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	s, err := h.subscription(ctx, ref.topic, ref.sub, false)
	if err != nil {
		return err
	}
	stats, err := store.QueueStatsGet(ctx, h.Pool, []int64{s.ID})
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, toSubscriptionResponse(ref.topic, s, stats[s.ID]))
}

// subscriptionList answers one page of the topic's subscriptions; stats
// are computed for that page only.
func (h *handler) subscriptionList(c echo.Context) error {
	topic, err := name(c, "topic")
	if err != nil {
		return err
	}
	page, err := pageOf(c, "subscriptions")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	t, err := store.TopicGet(ctx, h.Pool, topic)
	if err != nil {
		return err
	}
	subs, more, err := store.SubscriptionList(ctx, h.Pool,
		store.SubscriptionListParams{TopicID: t.ID, After: page.after, Limit: page.limit})
	if err != nil {
		return err
	}
	ids := make([]int64, len(subs))
	for i, s := range subs {
		ids[i] = s.ID
	}
	stats, err := store.QueueStatsGet(ctx, h.Pool, ids)
	if err != nil {
		return err
	}
	out := make([]subscriptionResponse, len(subs))
	var last string
	for i, s := range subs {
		out[i] = toSubscriptionResponse(t.Name, s, stats[s.ID])
		last = s.Name
	}
	return reply(c, http.StatusOK, map[string]any{"subscriptions": out, "next": page.next(more, last)})
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
	err = pgx.BeginFunc(ctx, h.Pool, func(tx pgx.Tx) error {
		id, err := store.SubscriptionDelete(ctx, tx, t.ID, ref.sub)
		if err != nil {
			return err
		}
		return jobs.InsertQueueCleanup(ctx, h.River, tx, id)
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
