package handlers

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

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
