package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// handleError runs errorHandler on err for one request and returns the
// recorded answer and what was logged.
func handleError(t *testing.T, method string, err error, before func(c echo.Context)) (*httptest.ResponseRecorder, string) {
	t.Helper()
	var logs bytes.Buffer
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(method, "/v1/queues/q/messages", nil), rec)
	c.Set("request_id", "req-1")
	if before != nil {
		before(c)
	}
	errorHandler(slog.New(slog.NewTextHandler(&logs, nil)))(err, c)
	return rec, logs.String()
}

// TestErrorHandlerAnswersProblems: every error becomes an
// application/problem+json answer carrying the request id and the
// problem's own headers; a 500's cause is logged with the request id and
// never shown to the client; a HEAD gets the status without a body.
func TestErrorHandlerAnswersProblems(t *testing.T) {
	t.Parallel()
	secret := errors.New("relation ferry.secret_table does not exist")
	rec, logs := handleError(t, http.MethodPost, fmt.Errorf("queue send: %w", secret), nil)
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType))
	var p Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), "%s", rec.Body)
	require.Equal(t, "req-1", p.RequestID)
	require.Equal(t, http.StatusInternalServerError, p.Status)
	require.NotContains(t, rec.Body.String(), "secret_table", "the cause stays in the log")
	require.Contains(t, logs, "secret_table")
	require.Contains(t, logs, "request_id=req-1")

	rec, logs = handleError(t, http.MethodPost, fmt.Errorf("queue send: %w", store.ErrUnavailable), nil)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"), "the problem's own header is sent")
	require.Empty(t, logs, "only a 500's cause is logged")

	rec, _ = handleError(t, http.MethodHead, echo.ErrNotFound, nil)
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType))
	require.Empty(t, rec.Body.Bytes(), "a HEAD answer has no body")
}

// TestErrorHandlerLeavesCommittedAnswers: an error after the answer began
// (a handler that wrote its status, then failed) changes nothing.
func TestErrorHandlerLeavesCommittedAnswers(t *testing.T) {
	t.Parallel()
	rec, _ := handleError(t, http.MethodGet, errors.New("late failure"), func(c echo.Context) {
		require.NoError(t, c.String(http.StatusOK, "partial"))
	})
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "partial", rec.Body.String())
}
