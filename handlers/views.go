package handlers

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/store"
)

// view answers resources of one kind (queues, subscriptions, topics) with
// what one statement reads for them by id (their stats, their offsets):
// for a page of them, that statement reads the page's resources only.
// T is the resource, V what is read for it, R its answer.
type view[T, V, R any] struct {
	key  func(T) (id int64, name string)
	read func(ctx context.Context, db store.DBTX, ids []int64) (map[int64]V, error)
	out  func(T, V) R
}

// queueView answers queues with their stats.
func queueView() view[store.Queue, store.QueueStats, queueResponse] {
	return view[store.Queue, store.QueueStats, queueResponse]{
		key:  func(q store.Queue) (int64, string) { return q.ID, q.Name },
		read: store.QueueStatsGet,
		out:  toQueueResponse,
	}
}

// topicView answers topics with their partitions' offsets.
func topicView() view[store.Topic, []store.PartitionOffsets, topicResponse] {
	return view[store.Topic, []store.PartitionOffsets, topicResponse]{
		key:  func(t store.Topic) (int64, string) { return t.ID, t.Name },
		read: store.TopicOffsets,
		out:  toTopicResponse,
	}
}

// subscriptionView answers subscriptions of the named topic with their
// stats.
func subscriptionView(topic string) view[store.Subscription, store.QueueStats, subscriptionResponse] {
	return view[store.Subscription, store.QueueStats, subscriptionResponse]{
		key:  func(s store.Subscription) (int64, string) { return s.ID, s.Name },
		read: store.QueueStatsGet,
		out: func(s store.Subscription, st store.QueueStats) subscriptionResponse {
			return toSubscriptionResponse(topic, s, st)
		},
	}
}

// one answers x.
func (v view[T, V, R]) one(ctx context.Context, db store.DBTX, x T) (R, error) {
	out, _, err := v.page(ctx, db, []T{x})
	if err != nil {
		var zero R
		return zero, err
	}
	return out[0], nil
}

// page answers xs, in order, and names the last of them (for the cursor
// of the next page).
func (v view[T, V, R]) page(ctx context.Context, db store.DBTX, xs []T) ([]R, string, error) {
	got, err := v.read(ctx, db, idsOf(xs, func(x T) int64 { id, _ := v.key(x); return id }))
	if err != nil {
		return nil, "", err
	}
	out := make([]R, len(xs))
	var last string
	for i, x := range xs {
		var id int64
		id, last = v.key(x)
		out[i] = v.out(x, got[id])
	}
	return out, last, nil
}

// idsOf returns the ids of xs, in order.
func idsOf[T any](xs []T, id func(T) int64) []int64 {
	ids := make([]int64, len(xs))
	for i, x := range xs {
		ids[i] = id(x)
	}
	return ids
}

// reply answers a page of a list: its items, under the list's kind, and
// the cursor of the next page (see next).
func (p listPage) reply(c echo.Context, items any, more bool, last string) error {
	return reply(c, http.StatusOK, map[string]any{p.kind: items, "next": p.next(more, last)})
}

// putStatus is a PUT's status: 201 when it created the resource.
func putStatus(created bool) int {
	if created {
		return http.StatusCreated
	}
	return http.StatusOK
}
