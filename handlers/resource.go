package handlers

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"

	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/store"
)

// The handlers of queues, topics and subscriptions share what this file
// holds: how a resource is answered with its stats or offsets (view), and
// a delete that schedules the cleanup of what it deleted.

// view answers resources of one kind (queues, subscriptions, topics) with
// what one statement reads for them by id (their stats, their offsets):
// for a page of them, that statement reads the page's resources only.
// T is the resource, V what is read for it, R its answer.
type view[T, V, R any] struct {
	key  func(T) (id int64, name string)
	read func(ctx context.Context, db store.DBTX, ids []int64) (map[int64]V, error)
	out  func(T, V) R
}

// get answers GET of the resource find returns.
func (v view[T, V, R]) get(c echo.Context, db store.DBTX, find func(context.Context) (T, error)) error {
	ctx := c.Request().Context()
	x, err := find(ctx)
	if err != nil {
		return err
	}
	out, err := v.one(ctx, db, x)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, out)
}

// getNamed answers GET of the resource named by the route's param (a
// queue, a topic), found by find.
func (v view[T, V, R]) getNamed(c echo.Context, db store.DBTX, param string, find func(context.Context, store.DBTX, string) (T, error)) error {
	n, err := name(c, param)
	if err != nil {
		return err
	}
	return v.get(c, db, func(ctx context.Context) (T, error) { return find(ctx, db, n) })
}

// list answers the page of a list of the given kind that list reads
// (see pageOf).
func (v view[T, V, R]) list(c echo.Context, db store.DBTX, kind string, list func(context.Context, listPage) ([]T, bool, error)) error {
	page, err := pageOf(c, kind)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	xs, more, err := list(ctx, page)
	if err != nil {
		return err
	}
	out, last, err := v.page(ctx, db, xs)
	if err != nil {
		return err
	}
	return page.reply(c, out, more, last)
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

// deleteAndClean runs del in a transaction and schedules there the
// cleanup of what it deleted: the content of the queues (or
// subscriptions) it returns, then the topic's events if it returns one
// (0: none).
func (h *handler) deleteAndClean(ctx context.Context, del func(tx pgx.Tx) (queueIDs []int64, topicID int64, err error)) error {
	return deleteAndClean(ctx, h.Pool, h.River, del)
}

// deleteAndClean is [handler.deleteAndClean] on pool, with River client r.
func deleteAndClean(ctx context.Context, pool *pgxpool.Pool, r *river.Client[pgx.Tx], del func(tx pgx.Tx) (queueIDs []int64, topicID int64, err error)) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		queueIDs, topicID, err := del(tx)
		if err != nil {
			return err
		}
		for _, id := range queueIDs {
			if err := jobs.InsertQueueCleanup(ctx, r, tx, id); err != nil {
				return err
			}
		}
		if topicID == 0 {
			return nil
		}
		return jobs.InsertTopicCleanup(ctx, r, tx, topicID)
	})
}
