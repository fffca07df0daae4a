package handlers

import (
	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
)

// addRoute registers fn for method and /v1+path behind the permission its
// route needs (routeRules); query
// names the query parameters the route takes (any other is a 400).
type addRoute func(method, path string, fn echo.HandlerFunc, query ...string)

// Route paths shared by several groups of routes. Every list pages with
// limit and after (API.md § Conventions).
const (
	queuePath        = "/queues/:queue"
	subscriptionPath = "/topics/:topic/subscriptions/:sub"
	groupPath        = "/topics/:topic/groups/:group"
)

// rule is the permission a route needs: action on the resource of kind
// its path names (the queue, topic, topic/sub or topic/group params; see
// resourceName). A list needs nothing up front (it shows what the key may
// read), except that a topic's subscriptions or groups are listed only for
// a key that may read the topic or some of them (to any other key the
// answer, a 404 for a topic that does not exist, would tell names).
type rule struct {
	kind   access.Kind
	action access.Action
	list   bool
}

// routeRules returns the permission of every /v1 route, by method and
// Echo path (API.md § Access control). A route not in it is refused to
// every key, the admin key too (fail closed), and
// TestEveryRouteHasAPermission fails. Whatever reveals message bodies or
// delivers messages needs receive: listing dead letters here, and a PUT
// that sets a queue's or subscription's push URL beyond the route's manage
// (pushURLPermission, which needs the body to tell).
func routeRules() map[string]rule {
	return map[string]rule{
		"GET /v1/queues":                                                 {access.Queue, access.Read, true},
		"PUT /v1/queues/:queue":                                          {access.Queue, access.Manage, false},
		"GET /v1/queues/:queue":                                          {access.Queue, access.Read, false},
		"DELETE /v1/queues/:queue":                                       {access.Queue, access.Manage, false},
		"POST /v1/queues/:queue/messages":                                {access.Queue, access.Send, false},
		"DELETE /v1/queues/:queue/messages":                              {access.Queue, access.Manage, false},
		"POST /v1/queues/:queue/messages/move":                           {access.Queue, access.Manage, false},
		"POST /v1/queues/:queue/receive":                                 {access.Queue, access.Receive, false},
		"POST /v1/queues/:queue/ack":                                     {access.Queue, access.Receive, false},
		"POST /v1/queues/:queue/nack":                                    {access.Queue, access.Receive, false},
		"POST /v1/queues/:queue/extend":                                  {access.Queue, access.Receive, false},
		"GET /v1/queues/:queue/dead-letters":                             {access.Queue, access.Receive, false},
		"GET /v1/queues/:queue/messages":                                 {access.Queue, access.Receive, false},
		"DELETE /v1/queues/:queue/dead-letters":                          {access.Queue, access.Manage, false},
		"POST /v1/queues/:queue/dead-letters/redrive":                    {access.Queue, access.Manage, false},
		"POST /v1/queues/:queue/rotate-secret":                           {access.Queue, access.Manage, false},
		"POST /v1/queues/:queue/enable":                                  {access.Queue, access.Manage, false},
		"GET /v1/queues/:queue/attempts":                                 {access.Queue, access.Manage, false},
		"GET /v1/topics":                                                 {access.Topic, access.Read, true},
		"PUT /v1/topics/:topic":                                          {access.Topic, access.Manage, false},
		"GET /v1/topics/:topic":                                          {access.Topic, access.Read, false},
		"DELETE /v1/topics/:topic":                                       {access.Topic, access.Manage, false},
		"POST /v1/topics/:topic/events":                                  {access.Topic, access.Publish, false},
		"GET /v1/topics/:topic/events":                                   {access.Topic, access.Read, false},
		"GET /v1/topics/:topic/subscriptions":                            {access.Subscription, access.Read, true},
		"PUT /v1/topics/:topic/subscriptions/:sub":                       {access.Subscription, access.Manage, false},
		"GET /v1/topics/:topic/subscriptions/:sub":                       {access.Subscription, access.Read, false},
		"DELETE /v1/topics/:topic/subscriptions/:sub":                    {access.Subscription, access.Manage, false},
		"POST /v1/topics/:topic/subscriptions/:sub/seek":                 {access.Subscription, access.Manage, false},
		"POST /v1/topics/:topic/subscriptions/:sub/receive":              {access.Subscription, access.Receive, false},
		"POST /v1/topics/:topic/subscriptions/:sub/ack":                  {access.Subscription, access.Receive, false},
		"POST /v1/topics/:topic/subscriptions/:sub/nack":                 {access.Subscription, access.Receive, false},
		"POST /v1/topics/:topic/subscriptions/:sub/extend":               {access.Subscription, access.Receive, false},
		"GET /v1/topics/:topic/subscriptions/:sub/dead-letters":          {access.Subscription, access.Receive, false},
		"GET /v1/topics/:topic/subscriptions/:sub/messages":              {access.Subscription, access.Receive, false},
		"DELETE /v1/topics/:topic/subscriptions/:sub/dead-letters":       {access.Subscription, access.Manage, false},
		"DELETE /v1/topics/:topic/subscriptions/:sub/messages":           {access.Subscription, access.Manage, false},
		"POST /v1/topics/:topic/subscriptions/:sub/dead-letters/redrive": {access.Subscription, access.Manage, false},
		"POST /v1/topics/:topic/subscriptions/:sub/rotate-secret":        {access.Subscription, access.Manage, false},
		"POST /v1/topics/:topic/subscriptions/:sub/enable":               {access.Subscription, access.Manage, false},
		"GET /v1/topics/:topic/subscriptions/:sub/attempts":              {access.Subscription, access.Manage, false},
		"GET /v1/topics/:topic/groups":                                   {access.Group, access.Read, true},
		"GET /v1/topics/:topic/groups/:group":                            {access.Group, access.Read, false},
		"DELETE /v1/topics/:topic/groups/:group":                         {access.Group, access.Manage, false},
		"POST /v1/topics/:topic/groups/:group/poll":                      {access.Group, access.Consume, false},
		"POST /v1/topics/:topic/groups/:group/commit":                    {access.Group, access.Consume, false},
		"POST /v1/topics/:topic/groups/:group/leave":                     {access.Group, access.Consume, false},
		"POST /v1/topics/:topic/groups/:group/seek":                      {access.Group, access.Manage, false},
		"POST /v1/keys":                                                  {access.Admin, access.All, false},
		"GET /v1/keys":                                                   {access.Admin, access.All, false},
		"GET /v1/keys/:id":                                               {access.Admin, access.All, false},
		"DELETE /v1/keys/:id":                                            {access.Admin, access.All, false},
		"GET /v1/audit":                                                  {access.Admin, access.All, false},
	}
}

// resourceName is the name of the resource of kind that the request's
// path names: "<queue>", "<topic>", "<topic>/<sub>" or "<topic>/<group>".
func resourceName(c echo.Context, kind access.Kind) string {
	switch kind {
	case access.Queue:
		return c.Param("queue")
	case access.Topic:
		return c.Param("topic")
	case access.Subscription:
		return c.Param("topic") + "/" + c.Param("sub")
	case access.Group:
		return c.Param("topic") + "/" + c.Param("group")
	}
	return ""
}

// check reports whether the rule lets key make the request, and if not
// the permission it lacks.
func (r rule) check(c echo.Context, key access.Key) (access.Permission, bool) {
	if r.list {
		if r.kind != access.Subscription && r.kind != access.Group {
			return access.Permission{}, true // filtered by the handler
		}
		topic := c.Param("topic")
		return access.Permission{Kind: r.kind, Name: topic + "/*", Action: r.action},
			key.AllowsSome(r.kind, topic, r.action) || key.Allows(access.Topic, topic, access.Read)
	}
	p := access.Permission{Kind: r.kind, Name: resourceName(c, r.kind), Action: r.action}
	return p, key.Allows(p.Kind, p.Name, p.Action)
}
