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

// queueRequest is the body of PUT /v1/queues/{queue}; every field optional.
type queueRequest struct {
	VisibilityTimeoutSeconds *int   `json:"visibility_timeout_seconds"`
	MaxReceives              *int   `json:"max_receives"`
	RetentionSeconds         *int   `json:"retention_seconds"`
	DelaySeconds             *int   `json:"delay_seconds"`
	DedupWindowSeconds       *int   `json:"dedup_window_seconds"`
	MaxDepth                 *int64 `json:"max_depth"`
	RetryMinSeconds          *int   `json:"retry_min_seconds"`
	RetryMaxSeconds          *int   `json:"retry_max_seconds"`
	// Push: null removes push; see pushRequest.
	Push rawOf[pushRequest] `json:"push"`
}

// Bounds of queue settings. They are part of the contract (openapi.yaml).
const (
	maxVisibilitySeconds = 43200   // 12 h, as SQS
	maxRetentionSeconds  = 1209600 // 14 d
	minRetentionSeconds  = 60
	maxDelaySeconds      = 86400
	maxDedupSeconds      = 86400
	maxReceivesLimit     = 1000
	maxDepthLimit        = 1_000_000_000_000
)

func (r queueRequest) validate() error {
	var cs checks
	cs.intRange("visibility_timeout_seconds", r.VisibilityTimeoutSeconds, 1, maxVisibilitySeconds)
	cs.intRange("max_receives", r.MaxReceives, 1, maxReceivesLimit)
	cs.intRange("retention_seconds", r.RetentionSeconds, minRetentionSeconds, maxRetentionSeconds)
	cs.intRange("delay_seconds", r.DelaySeconds, 0, maxDelaySeconds)
	cs.intRange("dedup_window_seconds", r.DedupWindowSeconds, 0, maxDedupSeconds)
	if r.MaxDepth != nil && (*r.MaxDepth < 0 || *r.MaxDepth > maxDepthLimit) {
		cs.add("max_depth", "must be between 0 and %d", int64(maxDepthLimit))
	}
	cs.intRange("retry_min_seconds", r.RetryMinSeconds, 0, maxVisibilitySeconds)
	cs.intRange("retry_max_seconds", r.RetryMaxSeconds, 0, maxVisibilitySeconds)
	return cs.err()
}

// queueResponse is a queue as clients see it.
type queueResponse struct {
	Name                     string        `json:"name"`
	VisibilityTimeoutSeconds int           `json:"visibility_timeout_seconds"`
	MaxReceives              int           `json:"max_receives"`
	RetentionSeconds         int           `json:"retention_seconds"`
	DelaySeconds             int           `json:"delay_seconds"`
	DedupWindowSeconds       int           `json:"dedup_window_seconds"`
	MaxDepth                 int64         `json:"max_depth"`
	RetryMinSeconds          int           `json:"retry_min_seconds"`
	RetryMaxSeconds          int           `json:"retry_max_seconds"`
	Push                     *pushResponse `json:"push"`
	CreatedAt                time.Time     `json:"created_at"`
	UpdatedAt                time.Time     `json:"updated_at"`
	Stats                    statsReply    `json:"stats"`
}

type statsReply struct {
	Available        int64 `json:"available"`
	InFlight         int64 `json:"in_flight"`
	Delayed          int64 `json:"delayed"`
	DeadLetters      int64 `json:"dead_letters"`
	OldestAgeSeconds int64 `json:"oldest_age_seconds"`
}

func toQueueResponse(q store.Queue, s store.QueueStats) queueResponse {
	return queueResponse{
		Name:                     q.Name,
		VisibilityTimeoutSeconds: q.VisibilityTimeoutSeconds,
		MaxReceives:              q.MaxReceives,
		RetentionSeconds:         q.RetentionSeconds,
		DelaySeconds:             q.DelaySeconds,
		DedupWindowSeconds:       q.DedupWindowSeconds,
		MaxDepth:                 q.MaxDepth,
		RetryMinSeconds:          q.RetryMinSeconds,
		RetryMaxSeconds:          q.RetryMaxSeconds,
		Push:                     toPushResponse(q),
		CreatedAt:                q.CreatedAt.UTC(),
		UpdatedAt:                q.UpdatedAt.UTC(),
		Stats:                    statsReply(s),
	}
}

func (h *handler) queuePut(c echo.Context) error {
	n, err := name(c, "queue")
	if err != nil {
		return err
	}
	var req queueRequest
	if err := h.decode(c, &req, true); err != nil {
		return err
	}
	if err := req.validate(); err != nil {
		return err
	}
	ctx := c.Request().Context()
	push, err := h.pushPatch(ctx, json.RawMessage(req.Push))
	if err != nil {
		return err
	}
	q, created, err := store.QueueUpsert(ctx, h.Pool, n, store.QueuePatch{
		VisibilityTimeoutSeconds: req.VisibilityTimeoutSeconds,
		MaxReceives:              req.MaxReceives,
		RetentionSeconds:         req.RetentionSeconds,
		DelaySeconds:             req.DelaySeconds,
		DedupWindowSeconds:       req.DedupWindowSeconds,
		MaxDepth:                 req.MaxDepth,
		RetryMinSeconds:          req.RetryMinSeconds,
		RetryMaxSeconds:          req.RetryMaxSeconds,
		Push:                     push,
	})
	if err != nil {
		return err
	}
	h.queues.Forget(n)
	if push != nil {
		h.pushChanged(q.ID)
		if h.Pusher != nil {
			h.Pusher.Forget()
			h.kickPush(ctx, q)
		}
	}
	stats, err := store.QueueStatsGet(ctx, h.Pool, []int64{q.ID})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return secretReply(c, status, toQueueResponse(q, stats[q.ID]), q.IssuedSecret)
}

func (h *handler) queueGet(c echo.Context) error {
	n, err := name(c, "queue")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	q, err := store.QueueGet(ctx, h.Pool, n)
	if err != nil {
		return err
	}
	stats, err := store.QueueStatsGet(ctx, h.Pool, []int64{q.ID})
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, toQueueResponse(q, stats[q.ID]))
}

// queueList answers one page of queues; stats are computed for that page
// only.
func (h *handler) queueList(c echo.Context) error {
	page, err := pageOf(c, "queues")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	queues, more, err := store.QueueList(ctx, h.Pool, store.QueueListParams{After: page.after, Limit: page.limit})
	if err != nil {
		return err
	}
	ids := make([]int64, len(queues))
	for i, q := range queues {
		ids[i] = q.ID
	}
	stats, err := store.QueueStatsGet(ctx, h.Pool, ids)
	if err != nil {
		return err
	}
	out := make([]queueResponse, len(queues))
	var last string
	for i, q := range queues {
		out[i] = toQueueResponse(q, stats[q.ID])
		last = q.Name
	}
	return reply(c, http.StatusOK, map[string]any{"queues": out, "next": page.next(more, last)})
}

// queueDelete removes the queue at once; its content is deleted in bounded
// batches by a River job inserted in the same transaction.
func (h *handler) queueDelete(c echo.Context) error {
	n, err := name(c, "queue")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	err = pgx.BeginFunc(ctx, h.Pool, func(tx pgx.Tx) error {
		id, err := store.QueueDelete(ctx, tx, n)
		if err != nil {
			return err
		}
		return jobs.InsertQueueCleanup(ctx, h.River, tx, id)
	})
	if err != nil {
		return err
	}
	h.queues.Forget(n)
	return c.NoContent(http.StatusNoContent)
}
