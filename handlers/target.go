package handlers

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/store"
)

// targetRef names what a message route acts on: a queue
// (/queues/{queue}/...) or a subscription, which is a queue fed by a topic
// (/topics/{topic}/subscriptions/{sub}/...). The same handlers serve both;
// only the resolution and the shape of a message differ.
type targetRef struct {
	queue, topic, sub string
}

// name is the queue's or the subscription's own name.
func (r targetRef) name() string {
	if r.isSub() {
		return r.sub
	}
	return r.queue
}

// isSub reports whether the route is a subscription's.
func (r targetRef) isSub() bool { return r.sub != "" }

// label names the target in metrics: the queue, or "topic/sub" (a slash
// cannot occur in a name).
func (r targetRef) label() string {
	if r.isSub() {
		return r.topic + "/" + r.sub
	}
	return r.queue
}

// targetOf validates the route's names, before the body is read, so a bad
// name is a 400 whatever else is wrong.
func targetOf(c echo.Context) (targetRef, error) {
	if c.Param("sub") == "" {
		n, err := name(c, "queue")
		return targetRef{queue: n}, err
	}
	t, err := name(c, "topic")
	if err != nil {
		return targetRef{}, err
	}
	s, err := name(c, "sub")
	return targetRef{topic: t, sub: s}, err
}

// resolve finds the target's queue: from the caches on hot paths, else
// from the database.
func (h *handler) resolve(ctx context.Context, r targetRef, cached bool) (store.Queue, error) {
	if !r.isSub() {
		if cached {
			return h.queues.Get(ctx, h.Pool, r.queue)
		}
		return store.QueueGet(ctx, h.Pool, r.queue)
	}
	s, err := h.subscription(ctx, r.topic, r.sub, cached)
	return s.Queue, err
}

// target validates the route's names and resolves its target from the
// database (not the caches): the start of a route that reads or changes
// the target itself rather than its messages' hot path.
func (h *handler) target(c echo.Context) (targetRef, store.Queue, error) {
	ref, err := targetOf(c)
	if err != nil {
		return ref, store.Queue{}, err
	}
	q, err := h.resolve(c.Request().Context(), ref, false)
	return ref, q, err
}

// targetBody validates the route's names, then decodes the body into req
// (a missing body is allowed when optional).
func (h *handler) targetBody(c echo.Context, req any, optional bool) (targetRef, error) {
	ref, err := targetOf(c)
	if err != nil {
		return ref, err
	}
	return ref, h.decode(c, req, optional)
}

// subscription finds the named subscription. A cached topic or
// subscription may be stale (deleted and created again elsewhere): a miss
// is checked once more with both read afresh (see store.NameCache.With).
func (h *handler) subscription(ctx context.Context, topic, sub string, cached bool) (store.Subscription, error) {
	if !cached {
		t, err := store.TopicGet(ctx, h.Pool, topic)
		if err != nil {
			return store.Subscription{}, err
		}
		return store.SubscriptionGet(ctx, h.Pool, t.ID, sub)
	}
	var s store.Subscription
	err := h.withTopic(ctx, topic, func(t store.Topic) (bool, error) {
		key := store.SubscriptionKey(t.ID, sub)
		var err error
		if s, err = h.subs.Get(ctx, h.Pool, key); err != nil {
			h.subs.Forget(key)
		}
		return err != nil, err
	})
	return s, err
}

// withTopic runs fn with the named topic from the cache, once more with
// the topic read afresh when fn reports ErrNotFound or stale (it may have
// been deleted and created again, or grown, through another instance).
func (h *handler) withTopic(ctx context.Context, name string, fn func(t store.Topic) (stale bool, err error)) error {
	return h.topics.With(ctx, h.Pool, name, fn)
}

// purge serves a DELETE of what the route's target holds (its messages,
// its dead letters): it resolves the target afresh, runs do, answers 204.
func (h *handler) purge(c echo.Context, do func(ctx context.Context, q store.Queue) error) error {
	_, q, err := h.target(c)
	if err != nil {
		return err
	}
	if err := do(c.Request().Context(), q); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
