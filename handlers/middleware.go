package handlers

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"
)

const headerRequestID = "X-Request-Id"

// clientRequestIDRe is what a client's X-Request-Id must be to be kept: at
// most 128 letters, digits and ._:- (a UUID, a trace id).
var clientRequestIDRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// requestID is Ferry's own id of the request (see h.requestID).
func requestID(c echo.Context) string {
	id, _ := c.Get("request_id").(string)
	return id
}

// clientRequestID is the X-Request-Id the client sent, if it is sane; ""
// otherwise.
func clientRequestID(c echo.Context) string {
	id, _ := c.Get("client_request_id").(string)
	return id
}

// ClientRequestID is the sane X-Request-Id the client sent with the
// request, "" when none: for the SQS face's audit entries.
func ClientRequestID(c echo.Context) string { return clientRequestID(c) }

// requestID gives every request an id of Ferry's own, made here and
// answered in X-Request-Id: in the logs, problems and the audit log, a
// request is named by it alone, so that no client can pass its request off
// as another's by sending that one's id. The X-Request-Id the client sent,
// if it matches clientRequestIDRe, is kept beside it (clientRequestID: in
// the request's log line and audit entry); any other is dropped.
func (h *handler) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		var b [12]byte
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		c.Set("request_id", id)
		if client := c.Request().Header.Get(headerRequestID); clientRequestIDRe.MatchString(client) {
			c.Set("client_request_id", client)
		}
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
		h.Metrics.ObserveHTTP(methodLabel(c.Request().Method), route, status, took)
		level := slog.LevelDebug
		if status >= 500 {
			level = slog.LevelWarn
		}
		if ctx := c.Request().Context(); h.Log.Enabled(ctx, level) {
			attrs := append([]any{"request_id", requestID(c), "method", c.Request().Method,
				"path", c.Request().URL.Path, "route", route, "status", status, "duration_ms", took.Milliseconds()},
				targetAttrs(c)...)
			if client := clientRequestID(c); client != "" {
				attrs = append(attrs, "client_request_id", client)
			}
			h.Log.Log(ctx, level, "request", attrs...)
		}
		return nil
	}
}

// targetAttrs names the queue, topic, subscription and consumer group the
// request is about (those its route has), for its log lines.
func targetAttrs(c echo.Context) []any {
	var attrs []any
	for _, p := range [...]struct{ param, key string }{
		{"queue", "queue"}, {"topic", "topic"}, {"sub", "subscription"}, {"group", "group"},
	} {
		if v := c.Param(p.param); v != "" {
			attrs = append(attrs, p.key, v)
		}
	}
	return attrs
}

// methodLabel is the method as a metrics label: a client may send any
// token as a method, and each would become a series of its own.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodPatch, http.MethodOptions:
		return m
	}
	return "other"
}

// guardBody bounds the time a request's body may take to arrive, and makes
// sure a body that is not read cannot hold the connection.
//
// net/http bounds only the headers (ReadHeaderTimeout); an http.Server
// ReadTimeout would also cancel long polls, whose connections sit unread
// while they wait. So a request with a body gets a read deadline of
// BodyReadTimeout, lifted as soon as the body has been read to its end: a
// long poll then waits without one. A request answered without its body
// read to the end (a 401, a bad name, an unknown route, a body over the
// limit) is answered with Connection: close and its connection's reading
// cut at once: else net/http would read (discard) up to 256 KiB of the body
// before it writes the answer's headers, and wait on a slow sender for as
// long as it pleases.
func (h *handler) guardBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Body == nil || req.Body == http.NoBody {
			return next(c)
		}
		rc := http.NewResponseController(c.Response())
		if h.BodyReadTimeout > 0 {
			_ = rc.SetReadDeadline(time.Now().Add(h.BodyReadTimeout))
		}
		body := &guardedBody{ReadCloser: req.Body, rc: rc}
		req.Body = body
		c.Response().Before(func() {
			if !body.read {
				c.Response().Header().Set(echo.HeaderConnection, "close")
				_ = rc.SetReadDeadline(time.Now())
			}
		})
		return next(c)
	}
}

// boundWrite bounds the time the answer of a request may take to be
// written (WriteTimeout), against clients that read it slowly or not at
// all, which would otherwise hold the connection, its goroutine and the
// answer's memory for as long as they please.
//
// An http.Server WriteTimeout would be counted from the end of the
// request's headers, so it would also cut long polls, which wait before
// they write. So the deadline is set when the answer's headers are
// written: a long poll waits without one, and every answer, a 10 MiB
// page too, then has WriteTimeout to reach the client. A client that
// does not read it by then has its connection closed (net/http lifts the
// deadline again after each request).
func (h *handler) boundWrite(next echo.HandlerFunc) echo.HandlerFunc {
	if h.WriteTimeout <= 0 {
		return next
	}
	return func(c echo.Context) error {
		c.Response().Before(func() {
			_ = http.NewResponseController(c.Response()).SetWriteDeadline(time.Now().Add(h.WriteTimeout))
		})
		return next(c)
	}
}

// guardedBody is a request body that lifts the read deadline once it has
// been read to its end.
type guardedBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	read bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.read {
		b.read = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
