// Package handlers is Ferry's HTTP edge: it decodes and validates requests,
// makes one store call (or one transaction) and encodes the answer. Errors
// of every kind become RFC 9457 problems in one error handler.
package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"

	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/store"
)

// Deps is everything the handlers need.
type Deps struct {
	Pool   *pgxpool.Pool
	Sender *store.Sender
	// Publisher appends events with group commit.
	Publisher *store.Publisher
	// Queues caches queue configurations for the hot paths; shared with
	// the Sender so that this instance's changes are seen at once.
	Queues   *store.QueueCache
	Notifier *store.Notifier
	// River inserts jobs (e.g. a deleted queue's cleanup) in the
	// transaction that makes them necessary.
	River    *river.Client[pgx.Tx]
	Log      *slog.Logger
	AdminKey string
	Limits   Limits
	Metrics  *Metrics
	// Stop is closed when the server starts shutting down: long polls end
	// early with what they have.
	Stop <-chan struct{}
	// Ready reports whether the database answers and the schema is current.
	Ready func(ctx context.Context) error
	// Spec is the OpenAPI document served at /openapi.yaml.
	Spec []byte
	// FallbackPoll is how often a long poll checks without a wake-up.
	FallbackPoll time.Duration
	// Pusher starts push delivery when a push target gets work.
	Pusher *jobs.Pusher
	// AllowPrivatePush lets push URLs name private, loopback and
	// link-local addresses (FERRY_ALLOW_PRIVATE_PUSH).
	AllowPrivatePush bool
	// BodyReadTimeout bounds how long a request's body may take to arrive
	// (0: no bound); see guardBody.
	BodyReadTimeout time.Duration
	// SessionPool serves what needs one session across transactions (a
	// subscription seek holds its queue's advisory lock across its
	// batches): a pool on FERRY_DATABASE_DIRECT_URL when Pool goes through
	// a transaction pooler. Nil: Pool.
	SessionPool *pgxpool.Pool
}

type handler struct {
	Deps
	limits Limits
	queues *store.QueueCache
	topics *store.TopicCache
	subs   *store.SubscriptionCache
}

// New returns the Echo instance serving Ferry's API.
func New(d Deps) *echo.Echo {
	if d.Limits.MaxBodyBytes == 0 {
		d.Limits = Limits{MaxBodyBytes: 256 << 10, MaxBatch: 1000, MaxRequestBytes: 10 << 20}
	}
	if d.Queues == nil {
		d.Queues = store.NewQueueCache(time.Second)
	}
	if d.SessionPool == nil {
		d.SessionPool = d.Pool
	}
	h := &handler{Deps: d, limits: d.Limits, queues: d.Queues, topics: store.NewTopicCache(time.Second),
		subs: store.NewSubscriptionCache(time.Second)}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(d.Log)
	e.Use(h.requestID, h.recover, h.observe, h.guardBody)

	// Every route says which query parameters it takes; any other is a 400.
	ops := func(path string, fn echo.HandlerFunc, methods ...string) {
		for _, m := range methods {
			e.Add(m, path, fn, queryParams())
		}
	}
	ops("/healthz", h.healthz, http.MethodGet, http.MethodHead)
	ops("/readyz", h.readyz, http.MethodGet, http.MethodHead)
	ops("/metrics", echo.WrapHandler(d.Metrics.Handler()), http.MethodGet)
	ops("/openapi.yaml", h.spec, http.MethodGet)

	// Auth is attached per route: Echo's Group.Use would add catch-all
	// routes that turn a wrong method (405) into a 404.
	v1 := func(method, path string, fn echo.HandlerFunc, query ...string) {
		e.Add(method, "/v1"+path, fn, h.auth, queryParams(query...))
	}
	// The lists page with limit and after (API.md § Conventions).
	list := []string{"limit", "after"}
	v1(http.MethodGet, "/queues", h.queueList, list...)
	v1(http.MethodPut, "/queues/:queue", h.queuePut)
	v1(http.MethodGet, "/queues/:queue", h.queueGet)
	v1(http.MethodDelete, "/queues/:queue", h.queueDelete)
	v1(http.MethodPost, "/queues/:queue/messages", h.messageSend)
	v1(http.MethodDelete, "/queues/:queue/messages", h.messagePurge)
	v1(http.MethodPost, "/queues/:queue/receive", h.messageReceive)
	v1(http.MethodPost, "/queues/:queue/ack", h.messageAck)
	v1(http.MethodPost, "/queues/:queue/nack", h.messageNack)
	v1(http.MethodPost, "/queues/:queue/extend", h.messageExtend)
	v1(http.MethodGet, "/queues/:queue/dead-letters", h.deadLetterList, "limit", "after")
	v1(http.MethodDelete, "/queues/:queue/dead-letters", h.deadLetterPurge)
	v1(http.MethodPost, "/queues/:queue/dead-letters/redrive", h.deadLetterRedrive)
	v1(http.MethodGet, "/topics", h.topicList, list...)
	v1(http.MethodPut, "/topics/:topic", h.topicPut)
	v1(http.MethodGet, "/topics/:topic", h.topicGet)
	v1(http.MethodDelete, "/topics/:topic", h.topicDelete)
	v1(http.MethodPost, "/topics/:topic/events", h.eventPublish)
	v1(http.MethodGet, "/topics/:topic/events", h.eventRead, "partition", "from_offset", "from_time", "limit", "wait_seconds")
	v1(http.MethodGet, "/topics/:topic/subscriptions", h.subscriptionList, list...)
	const sub = "/topics/:topic/subscriptions/:sub"
	v1(http.MethodPut, sub, h.subscriptionPut)
	v1(http.MethodGet, sub, h.subscriptionGet)
	v1(http.MethodDelete, sub, h.subscriptionDelete)
	v1(http.MethodPost, sub+"/seek", h.subscriptionSeek)
	// A subscription is a queue fed by its topic: the queue's handlers.
	v1(http.MethodPost, sub+"/receive", h.messageReceive)
	v1(http.MethodPost, sub+"/ack", h.messageAck)
	v1(http.MethodPost, sub+"/nack", h.messageNack)
	v1(http.MethodPost, sub+"/extend", h.messageExtend)
	v1(http.MethodGet, sub+"/dead-letters", h.deadLetterList, "limit", "after")
	v1(http.MethodDelete, sub+"/dead-letters", h.deadLetterPurge)
	v1(http.MethodPost, sub+"/dead-letters/redrive", h.deadLetterRedrive)
	v1(http.MethodGet, "/topics/:topic/groups", h.groupList, list...)
	const group = "/topics/:topic/groups/:group"
	v1(http.MethodGet, group, h.groupGet)
	v1(http.MethodDelete, group, h.groupDelete)
	v1(http.MethodPost, group+"/poll", h.groupPoll)
	v1(http.MethodPost, group+"/commit", h.groupCommit)
	v1(http.MethodPost, group+"/seek", h.groupSeek)
	v1(http.MethodPost, group+"/leave", h.groupLeave)
	for _, base := range []string{"/queues/:queue", sub} {
		v1(http.MethodPost, base+"/rotate-secret", h.pushRotateSecret)
		v1(http.MethodPost, base+"/enable", h.pushEnable)
		v1(http.MethodGet, base+"/attempts", h.pushAttempts, "status", "limit")
	}
	return e
}

func (h *handler) healthz(c echo.Context) error {
	return reply(c, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *handler) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := h.Ready(ctx); err != nil {
		h.Log.Warn("not ready", "error", err)
		return problem(http.StatusServiceUnavailable, codeUnavailable, "the database is unreachable or its schema is not current")
	}
	return reply(c, http.StatusOK, map[string]string{"status": "ready"})
}

func (h *handler) spec(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", h.Spec)
}
