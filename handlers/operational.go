package handlers

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// operationalRoutes registers the endpoints outside /v1: health,
// readiness, metrics (behind FERRY_METRICS_KEY when it is set) and the
// OpenAPI document. Every route says which
// query parameters it takes; any other is a 400.
func (h *handler) operationalRoutes(e *echo.Echo) {
	ops := func(path string, fn echo.HandlerFunc, methods ...string) {
		for _, m := range methods {
			e.Add(m, path, fn, queryParams())
		}
	}
	ops("/healthz", h.healthz, http.MethodGet, http.MethodHead)
	ops("/readyz", h.readyz, http.MethodGet, http.MethodHead)
	ops("/metrics", h.metricsKey(echo.WrapHandler(h.Metrics.Handler())), http.MethodGet)
	ops("/openapi.yaml", h.spec, http.MethodGet)
}

// metricsKey puts /metrics behind FERRY_METRICS_KEY when it is set: the
// request must carry it as a Bearer token (compared as SHA-256 digests in
// constant time, as auth compares API keys), else 401. Only that key
// opens /metrics; an API key does not. Without a metrics key /metrics
// stays open.
func (h *handler) metricsKey(next echo.HandlerFunc) echo.HandlerFunc {
	if h.MetricsKey == "" {
		return next
	}
	want := sha256.Sum256([]byte(h.MetricsKey))
	return func(c echo.Context) error {
		scheme, token, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="ferry-metrics"`)
			return problem(http.StatusUnauthorized, codeUnauthorized, "an Authorization: Bearer <metrics key> header is required (FERRY_METRICS_KEY is set)")
		}
		got := sha256.Sum256([]byte(strings.TrimSpace(token)))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="ferry-metrics", error="invalid_token"`)
			return problem(http.StatusUnauthorized, codeUnauthorized, "the metrics key is not valid")
		}
		return next(c)
	}
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
