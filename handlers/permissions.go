package handlers

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/metrics"
	"github.com/ferry-mq/ferry/store"
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
		"DELETE /v1/topics/:topic/subscriptions/:sub/dead-letters":       {access.Subscription, access.Manage, false},
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

// keyOf is the key the request was authorized with (authorize).
func keyOf(c echo.Context) access.Key {
	k, _ := c.Get("access_key").(access.Key)
	return k
}

// authorize is the middleware of the /v1 route method+path: it resolves
// the request's Bearer key (401 when there is none or it is not valid)
// and refuses with 403 `forbidden` what the route's rule does not let the
// key do, before the handler runs (so before any resource is looked up:
// no 404 tells a key which names exist). A route without a rule is
// refused (fail closed). A refused request is answered before its body is
// read, and its connection closed (guardBody). On an audited route
// (auditedRoutes) the request of a valid key is recorded in the audit log
// once its answer is made, refused or not.
func (h *handler) authorize(method, path string) echo.MiddlewareFunc {
	r, ruled := h.rules[method+" "+path]
	a, audited := auditedRoutes()[method+" "+path]
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			key, err := h.authenticate(c)
			if err != nil {
				return err
			}
			if audited {
				return h.audited(c, a, r.kind, key, func() error { return h.permit(c, r, ruled, key, next) })
			}
			return h.permit(c, r, ruled, key, next)
		}
	}
}

// permit runs next if rule r (ruled: there is one) lets key make the
// request, else answers 403.
func (h *handler) permit(c echo.Context, r rule, ruled bool, key access.Key, next echo.HandlerFunc) error {
	if !ruled {
		h.Metrics.AuthFailed(metrics.AuthForbidden)
		return problem(http.StatusForbidden, codeForbidden, "no permission is defined for this route")
	}
	if missing, ok := r.check(c, key); !ok {
		return h.forbidden(missing)
	}
	c.Set("access_key", key)
	return next(c)
}

// forbidden is the 403 of a request whose key lacks the permission
// missing, counted in ferry_auth_failures_total.
func (h *handler) forbidden(missing access.Permission) error {
	h.Metrics.AuthFailed(metrics.AuthForbidden)
	return problem(http.StatusForbidden, codeForbidden, "this API key lacks the permission "+missing.String())
}

// authenticate resolves the request's Bearer key. Its 401s, and
// permit's 403s, are counted in ferry_auth_failures_total.
func (h *handler) authenticate(c echo.Context) (access.Key, error) {
	header := c.Request().Header.Get(echo.HeaderAuthorization)
	scheme, token, ok := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		h.Metrics.AuthFailed(metrics.AuthMissing)
		c.Response().Header().Set(echo.HeaderConnection, "close")
		c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="ferry"`)
		return access.Key{}, problem(http.StatusUnauthorized, codeUnauthorized, "an Authorization: Bearer <api key> header is required")
	}
	key, err := h.resolver.Resolve(c.Request().Context(), token)
	if err == nil && key.Expired(time.Now()) {
		err = access.ErrInvalidKey
	}
	if errors.Is(err, access.ErrInvalidKey) {
		h.Metrics.AuthFailed(metrics.AuthInvalid)
		c.Response().Header().Set(echo.HeaderConnection, "close")
		c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="ferry", error="invalid_token"`)
		return access.Key{}, problem(http.StatusUnauthorized, codeUnauthorized, "the API key is not valid")
	}
	return key, err
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

// readable returns list restricted to the resources the request's key
// may read: may reports that of a resource's name (nil: all, for the
// admin key). The pages it returns are full pages of readable resources:
// it reads on through the underlying list until it has p.limit of them
// and knows whether another follows, so that a short page or a null next
// never hides readable resources further on.
func readable[T any](may func(name string) bool, name func(T) string, list func(context.Context, listPage) ([]T, bool, error)) func(context.Context, listPage) ([]T, bool, error) {
	if may == nil {
		return list
	}
	return func(ctx context.Context, p listPage) ([]T, bool, error) {
		out := []T{}
		// Read in large chunks: most of what is read may be filtered out.
		q := listPage{kind: p.kind, limit: maxPageLimit, after: p.after}
		for {
			xs, more, err := list(ctx, q)
			if err != nil {
				return nil, false, err
			}
			for _, x := range xs {
				if !may(name(x)) {
					continue
				}
				if len(out) == p.limit {
					return out, true, nil
				}
				out = append(out, x)
			}
			if !more || len(xs) == 0 {
				return out, false, nil
			}
			q.after = name(xs[len(xs)-1])
		}
	}
}

// mayRead returns what readable filters a list of kind with for the
// request's key (nil for the admin key): whether it may read the resource
// of the name, which in a topic's list is prefixed with the topic.
func mayRead(c echo.Context, kind access.Kind, topic string) func(string) bool {
	key := keyOf(c)
	if key.Admin {
		return nil
	}
	if topic != "" {
		return func(n string) bool { return key.Allows(kind, topic+"/"+n, access.Read) }
	}
	return func(n string) bool { return key.Allows(kind, n, access.Read) }
}

// pushURLPermission is what a PUT of the route's queue or subscription
// that sets its push URL needs beyond the route's manage: receive on it,
// since whoever chooses where its messages are pushed receives them. A
// PUT that gives the URL the target pushes to already changes nothing,
// and needs manage only; one that removes push (null) too.
func pushURLPermission(c echo.Context) access.Permission {
	kind := access.Queue
	if c.Param("sub") != "" {
		kind = access.Subscription
	}
	return access.Permission{Kind: kind, Name: resourceName(c, kind), Action: access.Receive}
}

// mayChangePushURL reports whether the request's key may set the push URL
// of the route's target to a new one, and if not the permission it lacks.
func mayChangePushURL(c echo.Context) (access.Permission, bool) {
	p := pushURLPermission(c)
	return p, keyOf(c).Allows(p.Kind, p.Name, p.Action)
}

// pushURLAllowed checks that the request's key may have the route's target
// push to url: one with receive on the target may (mayChangePushURL); any
// other only when url is the URL the target pushes to now, and then the
// store keeps it so (keep: store.PushPatch.KeepURL), whatever changes
// meanwhile. A 403 names the missing permission, also when the target
// does not exist (no 404 tells names). A new URL is noted for the
// request's audit entry, allowed or not.
func (h *handler) pushURLAllowed(c echo.Context, url string) (keep bool, err error) {
	before, err := h.pushURLNow(c)
	if err != nil {
		return false, err
	}
	missing, may := mayChangePushURL(c)
	if before == url {
		return !may, nil
	}
	notePushChange(c, before, url)
	if !may {
		return false, h.forbidden(missing)
	}
	return false, nil
}

// upsertError is the answer to a failed upsert of the route's queue or
// subscription: a 403 when the key would have changed the push URL it may
// not change (it changed meanwhile: see pushURLAllowed).
func (h *handler) upsertError(c echo.Context, err error) error {
	if errors.Is(err, store.ErrPushURLKept) {
		return h.forbidden(pushURLPermission(c))
	}
	return err
}

// mayManage returns whether the request's key may manage the resource of
// kind (a queue or a subscription of topic) of a name: whether it sees
// the resource's push URL whole (see toPushResponse).
func mayManage(c echo.Context, kind access.Kind, topic string) func(string) bool {
	key := keyOf(c)
	if topic != "" {
		return func(n string) bool { return key.Allows(kind, topic+"/"+n, access.Manage) }
	}
	return func(n string) bool { return key.Allows(kind, n, access.Manage) }
}
