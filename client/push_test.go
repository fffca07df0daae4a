package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestPushAttemptsAndRemovePush: a hook on loopback refuses the first
// delivery and takes the second; the attempts list filters by status; a
// PUT without push keeps it and one with RemovePush turns it off.
func TestPushAttemptsAndRemovePush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := ferrytest.Start(t, func(c *server.Config) { c.AllowPrivatePush = true })
	c, _ := newClient(t, env.URL)
	var calls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)

	_, _, err := c.PutQueue(ctx, "hooked", client.QueueConfig{RetryMinSeconds: client.Ptr(0), RetryMaxSeconds: client.Ptr(0),
		Push: &client.PushConfig{URL: hook.URL + "/q"}})
	require.NoError(t, err)
	require.NoError(t, c.EnableQueuePush(ctx, "hooked"))
	id := send(t, c, "hooked", "pushed")
	var ok []client.PushAttempt
	require.Eventually(t, func() bool {
		ok, err = c.ListQueuePushAttempts(ctx, "hooked", client.Attempts{Status: "succeeded"})
		require.NoError(t, err)
		return len(ok) == 1
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, id, ok[0].MessageID)
	require.Equal(t, http.StatusNoContent, *ok[0].StatusCode)
	failed, err := c.ListQueuePushAttempts(ctx, "hooked", client.Attempts{Status: "failed"})
	require.NoError(t, err)
	require.Len(t, failed, 1)
	require.Equal(t, http.StatusInternalServerError, *failed[0].StatusCode)
	all, err := c.ListQueuePushAttempts(ctx, "hooked", client.Attempts{Limit: 1})
	require.NoError(t, err)
	require.Len(t, all, 1, "the limit is sent")

	q, _, err := c.PutQueue(ctx, "hooked", client.QueueConfig{MaxReceives: client.Ptr(7)})
	require.NoError(t, err)
	require.NotNil(t, q.Push, "a PUT without push keeps it")
	require.Equal(t, hook.URL+"/q", q.Push.URL)
	q, _, err = c.PutQueue(ctx, "hooked", client.QueueConfig{RemovePush: true})
	require.NoError(t, err)
	require.Nil(t, q.Push)
	require.Equal(t, 7, q.MaxReceives)
}
