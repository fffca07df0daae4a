package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/ferrytest"
)

func TestQueueWalkthrough(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)

	r := env.Do("PUT", "/v1/queues/jobs", map[string]any{"max_receives": 2})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r = env.Do("PUT", "/v1/queues/jobs", map[string]any{"visibility_timeout_seconds": 60})
	require.Equal(t, http.StatusOK, r.Status)
	q := r.Map(t)
	require.EqualValues(t, 2, q["max_receives"], "PUT keeps omitted fields")
	require.EqualValues(t, 60, q["visibility_timeout_seconds"])

	r = env.Do("POST", "/v1/queues/jobs/messages", map[string]any{"messages": []any{
		map[string]any{"body": map[string]any{"n": 1}, "attributes": map[string]string{"type": "a"}},
	}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

	r = env.Do("POST", "/v1/queues/jobs/receive", map[string]any{"max_messages": 10})
	require.Equal(t, http.StatusOK, r.Status)
	var recv struct {
		Messages []struct {
			ID      string `json:"id"`
			Receipt string `json:"receipt"`
		} `json:"messages"`
	}
	r.JSON(t, &recv)
	require.Len(t, recv.Messages, 1)

	r = env.Do("POST", "/v1/queues/jobs/ack", map[string]any{"receipts": []string{recv.Messages[0].Receipt}})
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), `"status":"ok"`)
	r = env.Do("POST", "/v1/queues/jobs/ack", map[string]any{"receipts": []string{recv.Messages[0].Receipt}})
	require.Contains(t, string(r.Body), `"status":"stale"`)

	r = env.Do("GET", "/v1/queues/jobs", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.EqualValues(t, 0, r.Map(t)["stats"].(map[string]any)["available"])
}
