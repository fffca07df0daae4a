package handlers

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

const headerRequestID = "X-Request-Id"

var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func requestID(c echo.Context) string {
	id, _ := c.Get("request_id").(string)
	return id
}

// requestID takes the client's X-Request-Id when it is sane, else makes one,
// and echoes it in the response.
func (h *handler) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(headerRequestID)
		if !requestIDRe.MatchString(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		c.Set("request_id", id)
		c.Response().Header().Set(headerRequestID, id)
		return next(c)
	}
}

// recover turns a panic into a logged 500, never a dropped connection.
func (h *handler) recover(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return next(c)
	}
}

// observe logs each request and records its duration.
func (h *handler) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		status := c.Response().Status
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		took := time.Since(start)
		h.Metrics.observeHTTP(c.Request().Method, route, status, took)
		level := slog.LevelDebug
		if status >= 500 {
			level = slog.LevelWarn
		}
		if ctx := c.Request().Context(); h.Log.Enabled(ctx, level) {
			h.Log.Log(ctx, level, "request", "request_id", requestID(c), "method", c.Request().Method,
				"path", c.Request().URL.Path, "route", route, "status", status, "duration_ms", took.Milliseconds())
		}
		return nil
	}
}

// auth requires the admin key as a Bearer token. Keys are compared as
// SHA-256 digests in constant time, so neither content nor length leaks.
func (h *handler) auth(next echo.HandlerFunc) echo.HandlerFunc {
	want := sha256.Sum256([]byte(h.AdminKey))
	return func(c echo.Context) error {
		header := c.Request().Header.Get(echo.HeaderAuthorization)
		scheme, token, ok := strings.Cut(header, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="ferry"`)
			return problem(http.StatusUnauthorized, codeUnauthorized, "an Authorization: Bearer <api key> header is required")
		}
		got := sha256.Sum256([]byte(strings.TrimSpace(token)))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="ferry", error="invalid_token"`)
			return problem(http.StatusUnauthorized, codeUnauthorized, "the API key is not valid")
		}
		return next(c)
	}
}
