package handlers

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// New returns the Echo instance serving Ferry's API: the middleware, then
// every route, resource by resource (the functions below).
func New(d Deps) *echo.Echo {
	// FERRY_MAX_BODY_BYTES=0 reaches here as a zero Limits: the defaults.
	if d.Limits.MaxBodyBytes == 0 {
		d.Limits = DefaultLimits()
	}
	h := &handler{Deps: d, limits: d.Limits, queues: d.Queues, topics: store.NewTopicCache(time.Second),
		subs: store.NewSubscriptionCache(time.Second), resolver: d.Resolver, rules: routeRules()}
	if h.resolver == nil {
		h.resolver = access.NewAdminKey(d.AdminKey)
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(d.Log)
	e.Use(h.requestID, h.recover, h.observe, h.guardBody, h.boundWrite)

	h.operationalRoutes(e)
	v1 := h.v1Routes(e)
	h.queueRoutes(v1)
	h.topicRoutes(v1)
	h.subscriptionRoutes(v1)
	h.consumerGroupRoutes(v1)
	h.pushRoutes(v1)
	h.keyRoutes(v1)
	h.auditRoutes(v1)
	return e
}

// v1Routes returns the function that registers an API route. The key and
// its permission are checked per route (authorize): Echo's Group.Use would
// add catch-all routes that turn a wrong method (405) into a 404.
func (h *handler) v1Routes(e *echo.Echo) addRoute {
	return func(method, path string, fn echo.HandlerFunc, query ...string) {
		e.Add(method, "/v1"+path, fn, h.authorize(method, "/v1"+path), queryParams(query...))
	}
}

// queueRoutes registers the queues and their messages and dead letters.
func (h *handler) queueRoutes(v1 addRoute) {
	v1(http.MethodGet, "/queues", h.queueList, "limit", "after")
	v1(http.MethodPut, queuePath, h.queuePut)
	v1(http.MethodGet, queuePath, h.queueGet)
	v1(http.MethodDelete, queuePath, h.queueDelete)
	v1(http.MethodPost, queuePath+"/messages", h.messageSend)
	v1(http.MethodDelete, queuePath+"/messages", h.messagePurge)
	v1(http.MethodPost, queuePath+"/messages/move", h.messageMove)
	h.consumerRoutes(v1, queuePath)
}

// consumerRoutes registers what a consumer of a queue does (receive, ack,
// nack, extend, dead letters) under base: a queue's, or a subscription's,
// which is a queue fed by its topic and served by the queue's handlers.
func (h *handler) consumerRoutes(v1 addRoute, base string) {
	v1(http.MethodPost, base+"/receive", h.messageReceive)
	v1(http.MethodPost, base+"/ack", h.messageAck)
	v1(http.MethodPost, base+"/nack", h.messageNack)
	v1(http.MethodPost, base+"/extend", h.messageExtend)
	v1(http.MethodGet, base+"/messages", h.messagePeek, "limit", "after", "state")
	v1(http.MethodGet, base+"/dead-letters", h.deadLetterList, "limit", "after")
	v1(http.MethodDelete, base+"/dead-letters", h.deadLetterPurge)
	v1(http.MethodPost, base+"/dead-letters/redrive", h.deadLetterRedrive)
}

// topicRoutes registers the topics and their events.
func (h *handler) topicRoutes(v1 addRoute) {
	v1(http.MethodGet, "/topics", h.topicList, "limit", "after")
	v1(http.MethodPut, "/topics/:topic", h.topicPut)
	v1(http.MethodGet, "/topics/:topic", h.topicGet)
	v1(http.MethodDelete, "/topics/:topic", h.topicDelete)
	v1(http.MethodPost, "/topics/:topic/events", h.eventPublish)
	v1(http.MethodGet, "/topics/:topic/events", h.eventRead, "partition", "from_offset", "from_time", "limit", "wait_seconds")
}

// subscriptionRoutes registers the subscriptions of a topic, with the
// consumer routes of the queue each one is.
func (h *handler) subscriptionRoutes(v1 addRoute) {
	v1(http.MethodGet, "/topics/:topic/subscriptions", h.subscriptionList, "limit", "after")
	v1(http.MethodPut, subscriptionPath, h.subscriptionPut)
	v1(http.MethodGet, subscriptionPath, h.subscriptionGet)
	v1(http.MethodDelete, subscriptionPath, h.subscriptionDelete)
	v1(http.MethodPost, subscriptionPath+"/seek", h.subscriptionSeek)
	v1(http.MethodDelete, subscriptionPath+"/messages", h.messagePurge)
	h.consumerRoutes(v1, subscriptionPath)
}

// consumerGroupRoutes registers the consumer groups of a topic.
func (h *handler) consumerGroupRoutes(v1 addRoute) {
	v1(http.MethodGet, "/topics/:topic/groups", h.consumerGroupList, "limit", "after")
	v1(http.MethodGet, groupPath, h.consumerGroupGet)
	v1(http.MethodDelete, groupPath, h.consumerGroupDelete)
	v1(http.MethodPost, groupPath+"/poll", h.consumerGroupPoll)
	v1(http.MethodPost, groupPath+"/commit", h.consumerGroupCommit)
	v1(http.MethodPost, groupPath+"/seek", h.consumerGroupSeek)
	v1(http.MethodPost, groupPath+"/leave", h.consumerGroupLeave)
}

// auditRoutes registers the audit log (admin only).
func (h *handler) auditRoutes(v1 addRoute) {
	v1(http.MethodGet, "/audit", h.auditList, "limit", "after")
}

// pushRoutes registers push delivery's endpoints on queues and
// subscriptions alike.
func (h *handler) pushRoutes(v1 addRoute) {
	for _, base := range []string{queuePath, subscriptionPath} {
		v1(http.MethodPost, base+"/rotate-secret", h.pushRotateSecret)
		v1(http.MethodPost, base+"/enable", h.pushEnable)
		v1(http.MethodGet, base+"/attempts", h.pushAttempts, "status", "limit")
	}
}
