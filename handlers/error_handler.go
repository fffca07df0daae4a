package handlers

import (
	"bytes"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"
)

// errorHandler is the one place errors become responses. Causes of 5xx are
// logged with the request id and never shown to the client.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		p := toProblem(err)
		if p.Status == http.StatusInternalServerError && c.Request().Context().Err() != nil {
			// The client went away mid-request; there is no one to answer.
			log.Debug("client left before the answer", "request_id", requestID(c), "error", err)
			p = problem(499, codeInternal, "client closed the request")
		} else if p.Status == http.StatusInternalServerError {
			log.Error("request failed", append([]any{"request_id", requestID(c), "method", c.Request().Method,
				"path", c.Request().URL.Path, "error", err}, targetAttrs(c)...)...)
		}
		p.RequestID = requestID(c)
		for k, vs := range p.header {
			for _, v := range vs {
				c.Response().Header().Add(k, v)
			}
		}
		// Encoded before the status is written, as every answer is (reply);
		// a problem holds only strings and numbers, which always encode.
		var body bytes.Buffer
		_ = jsonEncode(&body, p)
		c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
		c.Response().WriteHeader(p.Status)
		if c.Request().Method == http.MethodHead {
			return
		}
		_, _ = c.Response().Write(body.Bytes())
	}
}
