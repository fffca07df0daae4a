package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestRetryQueueFull: a send refused with 429 (nothing written) is retried
// after Retry-After and lands once the queue has room.
func TestRetryQueueFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, c, rec := setup(t)
	_, _, err := c.PutQueue(ctx, "full", client.QueueConfig{MaxDepth: client.Ptr[int64](1)})
	require.NoError(t, err)
	_, err = c.Send(ctx, "full", client.SendMessage{Body: 1})
	require.NoError(t, err)

	sent := make(chan error, 1)
	go func() {
		_, err := c.Send(ctx, "full", client.SendMessage{Body: 2}) // no dedup id: 429 is still safe
		sent <- err
	}()
	require.Eventually(t, func() bool { return rec.count("POST messages Too Many Requests") >= 1 }, 10*time.Second, 5*time.Millisecond)
	ms, err := c.Receive(ctx, "full", client.Receive{})
	require.NoError(t, err)
	_, err = c.Ack(ctx, "full", ms[0].Receipt)
	require.NoError(t, err)
	require.NoError(t, <-sent)
	require.EqualValues(t, 1, stats(t, c, "full").Available)

	// Without room and with retries used up, the 429 comes back as an *Error.
	few := client.New(env.URL, ferrytest.AdminKey, client.WithRetries(1))
	start := time.Now()
	_, err = few.Send(ctx, "full", client.SendMessage{Body: 3})
	require.True(t, client.IsCode(err, "queue_full"), "%v", err)
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, time.Second, e.RetryAfter)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "the retry waited Retry-After")
}

// TestRetryUnavailable: on 503 a send with dedup ids is retried, one
// without is not (the first attempt may have committed); a receive is.
func TestRetryUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := ferrytest.Start(t)
	proxy := newUnavailableProxy(t, env.URL, http.MethodPost, "messages", 2)
	c, rec := newClient(t, proxy.URL)
	_, _, err := c.PutQueue(ctx, "q", client.QueueConfig{})
	require.NoError(t, err)

	_, err = c.Send(ctx, "q", client.SendMessage{Body: 1})
	require.True(t, client.IsCode(err, "unavailable"), "%v", err)
	require.Equal(t, 1, rec.count("POST messages Service Unavailable"), "a send without dedup id is not retried")

	sent, err := c.Send(ctx, "q", client.SendMessage{Body: 2, DedupID: "x"})
	require.NoError(t, err)
	require.False(t, sent.Duplicate)
	require.Equal(t, 2, rec.count("POST messages Service Unavailable"))
	require.Equal(t, 1, rec.count("POST messages Created"))
	require.EqualValues(t, 1, stats(t, c, "q").Available)

	rp := newUnavailableProxy(t, env.URL, http.MethodPost, "receive", 3)
	rc, rrec := newClient(t, rp.URL)
	start := time.Now()
	ms, err := rc.Receive(ctx, "q", client.Receive{})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, 3, rrec.count("POST receive Service Unavailable"))
	require.GreaterOrEqual(t, time.Since(start), time.Second, "Retry-After was honoured")

	// Network errors: an idempotent receive is retried, a send without
	// dedup id is not.
	dp := newUnavailableProxy(t, env.URL, http.MethodPost, "receive", 2, true)
	dc, drec := newClient(t, dp.URL)
	_, err = dc.Send(ctx, "q", client.SendMessage{Body: 3})
	require.NoError(t, err)
	ms, err = dc.Receive(ctx, "q", client.Receive{})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, 2, drec.count("POST receive neterr"))
	sp := newUnavailableProxy(t, env.URL, http.MethodPost, "messages", 1, true)
	sc, srec := newClient(t, sp.URL)
	_, err = sc.Send(ctx, "q", client.SendMessage{Body: 4})
	var e *client.Error
	require.Error(t, err)
	require.False(t, errors.As(err, &e), "a network error is not a problem: %v", err)
	require.Equal(t, 1, srec.count("POST messages neterr"))

	// Retries end with the context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = rc.Receive(cctx, "q", client.Receive{})
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}
