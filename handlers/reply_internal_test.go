package handlers

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

// TestReplyEncodesBeforeTheStatus: an answer that cannot be encoded (a
// json.RawMessage deeper than encoding/json writes) is a logged 500
// problem, never its status with a body cut short (it was a 200 with an
// empty body, and nothing logged).
func TestReplyEncodesBeforeTheStatus(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	e := echo.New()
	e.HTTPErrorHandler = errorHandler(slog.New(slog.NewTextHandler(&logs, nil)))
	deep := json.RawMessage(strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1))
	e.GET("/deep", func(c echo.Context) error {
		return reply(c, http.StatusOK, map[string]any{"messages": []any{map[string]any{"body": deep}}})
	})
	e.GET("/fine", func(c echo.Context) error {
		return reply(c, http.StatusCreated, map[string]any{"body": json.RawMessage(`[1, 2]`)})
	})

	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/deep", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType))
	var p Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), "a whole problem: %s", rec.Body)
	require.Equal(t, codeInternal, p.Code)
	require.NotContains(t, rec.Body.String(), "max depth", "no internals shown")
	require.Contains(t, logs.String(), "request failed")
	require.Contains(t, logs.String(), "exceeded max depth")

	rec = httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/fine", nil))
	require.Equal(t, http.StatusCreated, rec.Code)
	require.Equal(t, echo.MIMEApplicationJSON, rec.Header().Get(echo.HeaderContentType))
	require.Equal(t, `{"body":[1,2]}`+"\n", rec.Body.String())
}
