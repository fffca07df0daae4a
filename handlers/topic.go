package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// Bounds of topic settings (part of the contract, openapi.yaml).
const (
	maxPartitions            = 256
	minTopicRetentionSeconds = 60
	maxTopicRetentionSeconds = 31536000 // a year
)

type topicRequest struct {
	Partitions         *int    `json:"partitions"`
	RetentionSeconds   *int    `json:"retention_seconds"`
	DedupWindowSeconds *int    `json:"dedup_window_seconds"`
	Source             *string `json:"source"`
}

type topicReply struct {
	Name               string         `json:"name"`
	Partitions         int            `json:"partitions"`
	RetentionSeconds   int            `json:"retention_seconds"`
	DedupWindowSeconds int            `json:"dedup_window_seconds"`
	Source             string         `json:"source"`
	CreatedAt          time.Time      `json:"created_at"`
	UpdatedAt          time.Time      `json:"updated_at"`
	Offsets            []offsetsReply `json:"offsets"`
}

type offsetsReply struct {
	Partition    int   `json:"partition"`
	HeadOffset   int64 `json:"head_offset"`
	OldestOffset int64 `json:"oldest_offset"`
}

func toTopicResponse(t store.Topic, offs []store.PartitionOffsets) topicReply {
	out := topicReply{
		Name: t.Name, Partitions: t.Partitions, RetentionSeconds: t.RetentionSeconds,
		DedupWindowSeconds: t.DedupWindowSeconds, Source: t.CloudSource(), CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC(),
		Offsets: make([]offsetsReply, len(offs)),
	}
	for i, o := range offs {
		out.Offsets[i] = offsetsReply(o)
	}
	return out
}

func (h *handler) topicPut(c echo.Context) error {
	n, err := name(c, "topic")
	if err != nil {
		return err
	}
	var req topicRequest
	if err := h.decode(c, &req, true); err != nil {
		return err
	}
	var cs checks
	cs.intRange("partitions", req.Partitions, 1, maxPartitions)
	cs.intRange("retention_seconds", req.RetentionSeconds, minTopicRetentionSeconds, maxTopicRetentionSeconds)
	cs.intRange("dedup_window_seconds", req.DedupWindowSeconds, 0, maxDedupSeconds)
	if req.Source != nil {
		if msg := checkContextAttr("source", *req.Source); msg != "" {
			cs.add("source", "%s", msg)
		}
	}
	if err := cs.err(); err != nil {
		return err
	}
	ctx := c.Request().Context()
	t, created, err := store.TopicUpsert(ctx, h.Pool, n, store.TopicPatch(req))
	h.topics.Forget(n)
	if err != nil {
		var shrink *store.ShrinkError
		if errors.As(err, &shrink) {
			return problem(http.StatusConflict, codeConflict, shrink.Error())
		}
		return err
	}
	out, err := topicView().one(ctx, h.Pool, t)
	if err != nil {
		return err
	}
	return reply(c, putStatus(created), out)
}

func (h *handler) topicGet(c echo.Context) error {
	return topicView().getNamed(c, h.Pool, "topic", store.TopicGet)
}

// topicList answers one page of topics, with the offsets of that page's
// topics only.
func (h *handler) topicList(c echo.Context) error {
	name := func(t store.Topic) string { return t.Name }
	return topicView().list(c, h.Pool, "topics", readable(mayRead(c, access.Topic, ""), name, func(ctx context.Context, p listPage) ([]store.Topic, bool, error) {
		return store.TopicList(ctx, h.Pool, store.TopicListParams{After: p.after, Limit: p.limit})
	}))
}

func (h *handler) topicDelete(c echo.Context) error {
	n, err := name(c, "topic")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	err = h.deleteAndClean(ctx, func(tx pgx.Tx) ([]int64, int64, error) {
		id, subs, err := store.TopicDelete(ctx, tx, n)
		return subs, id, err
	})
	h.topics.Forget(n)
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// topicView answers topics with their partitions' offsets.
func topicView() view[store.Topic, []store.PartitionOffsets, topicReply] {
	return view[store.Topic, []store.PartitionOffsets, topicReply]{
		key:  func(t store.Topic) (int64, string) { return t.ID, t.Name },
		read: store.TopicOffsets,
		out:  toTopicResponse,
	}
}
