package handlers

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/metrics"
)

// routerForTest is the real router, with no database behind it: enough to
// list its routes and to run middleware that answers before a handler.
func routerForTest() *echo.Echo {
	return New(Deps{Log: slog.Default(), Metrics: metrics.New(nil, slog.Default(), 0), AdminKey: "route-test-admin-key"})
}

// Every /v1 route of the real router has a permission in routeRules, and
// every permission there belongs to a route: a route added without one
// fails here (and is refused to every key: see TestRouteWithoutRuleRefused).
func TestEveryRouteHasAPermission(t *testing.T) {
	t.Parallel()
	rules := routeRules()
	seen := map[string]bool{}
	n := 0
	for _, r := range routerForTest().Routes() {
		if !strings.HasPrefix(r.Path, "/v1/") && r.Path != "/v1" {
			continue
		}
		n++
		k := r.Method + " " + r.Path
		seen[k] = true
		rule, ok := rules[k]
		checkRule(t, k, rule, ok)
	}
	require.Positive(t, n, "the router has /v1 routes")
	for k := range rules {
		require.True(t, seen[k], "routeRules has %q, which no route of the router has", k)
	}
}

// checkRule checks that route k has a rule whose action is one of its
// kind's, and whose kind its path names.
func checkRule(t *testing.T, k string, r rule, ok bool) {
	t.Helper()
	if !ok {
		t.Errorf("route %s has no permission in routeRules (handlers/route_rule.go)", k)
		return
	}
	if r.kind == access.Admin {
		require.Equal(t, access.All, r.action, "%s: admin's only action is *", k)
		require.False(t, r.list, "%s: admin routes are not filtered lists", k)
		return
	}
	require.Contains(t, access.Actions(r.kind), r.action, "%s: %s is not an action of %s", k, r.action, r.kind)
	params := map[access.Kind]string{access.Queue: ":queue", access.Topic: ":topic", access.Subscription: ":sub", access.Group: ":group"}
	if r.list {
		require.True(t, strings.HasSuffix(k, "/queues") || strings.HasSuffix(k, "/topics") ||
			strings.HasSuffix(k, "/subscriptions") || strings.HasSuffix(k, "/groups"), "%s is not a list", k)
		require.Equal(t, access.Read, r.action, "%s: a list needs read", k)
		return
	}
	require.Contains(t, k, params[r.kind], "%s: its path does not name the %s", k, r.kind)
}

// A route without a rule is refused, to the admin key too: fail closed.
func TestRouteWithoutRuleRefused(t *testing.T) {
	t.Parallel()
	e := echo.New()
	h := &handler{Deps: Deps{Metrics: metrics.New(nil, slog.Default(), 0)},
		resolver: access.NewAdminKey("route-test-admin-key"), rules: routeRules()}
	e.HTTPErrorHandler = errorHandler(slog.Default())
	reached := false
	e.Add(http.MethodGet, "/v1/unruled", func(c echo.Context) error { reached = true; return c.NoContent(http.StatusOK) },
		h.authorize(http.MethodGet, "/v1/unruled"))
	req := httptest.NewRequest(http.MethodGet, "/v1/unruled", nil)
	req.Header.Set("Authorization", "Bearer route-test-admin-key")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	require.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), `"code":"forbidden"`)
	require.False(t, reached, "the handler of a route without a rule never runs")
}
