package handlers

import (
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

// A request's log lines name the queue, topic, subscription or group its
// route is about.
func TestTargetAttrs(t *testing.T) {
	e := echo.New()
	c := e.NewContext(httptest.NewRequest("POST", "/v1/topics/t/subscriptions/s/receive", nil), httptest.NewRecorder())
	c.SetParamNames("topic", "sub")
	c.SetParamValues("orders", "billing")
	require.Equal(t, []any{"topic", "orders", "subscription", "billing"}, targetAttrs(c))

	c = e.NewContext(httptest.NewRequest("POST", "/v1/topics/t/groups/g/poll", nil), httptest.NewRecorder())
	c.SetParamNames("topic", "group")
	c.SetParamValues("orders", "stats")
	require.Equal(t, []any{"topic", "orders", "group", "stats"}, targetAttrs(c))

	c = e.NewContext(httptest.NewRequest("GET", "/v1/queues/q", nil), httptest.NewRecorder())
	c.SetParamNames("queue")
	c.SetParamValues("jobs")
	require.Equal(t, []any{"queue", "jobs"}, targetAttrs(c))

	c = e.NewContext(httptest.NewRequest("GET", "/healthz", nil), httptest.NewRecorder())
	require.Empty(t, targetAttrs(c))
}
