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
)

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

// signedInKey is the context key of a request made in-process by another
// face for a key it authenticated itself ([WithKey]).
type signedInKey struct{}

// WithKey returns ctx carrying key, for a request that another face of
// this process (the console, package handlers/console) makes to the REST
// face on behalf of a key it has already resolved and checked: such a
// request needs no Authorization header and is then authorized, audited
// and answered exactly as the key's own REST request would be. A request
// from the network cannot carry it: only code in this process makes
// contexts.
func WithKey(ctx context.Context, key access.Key) context.Context {
	return context.WithValue(ctx, signedInKey{}, key)
}

// authenticate resolves the request's Bearer key (or takes the key an
// in-process caller gave, WithKey). Its 401s, and
// permit's 403s, are counted in ferry_auth_failures_total.
func (h *handler) authenticate(c echo.Context) (access.Key, error) {
	if key, ok := c.Request().Context().Value(signedInKey{}).(access.Key); ok {
		if key.Expired(time.Now()) {
			return access.Key{}, problem(http.StatusUnauthorized, codeUnauthorized, "the API key is not valid")
		}
		return key, nil
	}
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

// keyRecheck is what the request's long poll (a receive, an event read, a
// group poll) calls before each claim or read after its first, that is
// after each wait: the request's key is authenticated again, so that a
// key revoked or expired while the poll waits gets the 401 a new request
// would (code unauthorized) and nothing is claimed or read for it. It
// reads the key cache, as every request does: no database read while the
// key is held there, which it is until a delete of it is heard (a deleted
// key is read once, and found gone).
func (h *handler) keyRecheck(c echo.Context) func(context.Context) error {
	return func(context.Context) error {
		_, err := h.authenticate(c)
		return err
	}
}
