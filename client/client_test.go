package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// TestQueueCalls drives every typed queue call against a real Ferry; the
// client validates each request and answer against the spec.
func TestQueueCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c, _ := setup(t)

	q, created, err := c.PutQueue(ctx, "q1", client.QueueConfig{MaxReceives: client.Ptr(3), RetryMinSeconds: client.Ptr(0), RetryMaxSeconds: client.Ptr(0)})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, 3, q.MaxReceives)
	q, created, err = c.PutQueue(ctx, "q1", client.QueueConfig{VisibilityTimeoutSeconds: client.Ptr(45)})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, 45, q.VisibilityTimeoutSeconds)
	require.Equal(t, 3, q.MaxReceives, "an omitted field keeps its value")
	_, _, err = c.PutQueue(ctx, "q2", client.QueueConfig{})
	require.NoError(t, err)

	page, err := c.ListQueues(ctx, client.Page{Limit: 1})
	require.NoError(t, err)
	require.Len(t, page.Queues, 1)
	require.Equal(t, "q1", page.Queues[0].Name)
	require.NotNil(t, page.Next)
	page, err = c.ListQueues(ctx, client.Page{Limit: 1, After: *page.Next})
	require.NoError(t, err)
	require.Equal(t, "q2", page.Queues[0].Name)

	one, err := c.Send(ctx, "q1", client.SendMessage{Body: map[string]any{"n": 1}, Attributes: map[string]string{"type": "t"}, Group: "g"})
	require.NoError(t, err)
	require.NotEmpty(t, one.ID)
	batch, err := c.SendBatch(ctx, "q1", []client.SendMessage{
		{Body: "two", DedupID: "d2"},
		{Body: json.RawMessage(`[3]`), DedupID: "d2"},
		{Body: 4, DelaySeconds: client.Ptr(3600)},
	})
	require.NoError(t, err)
	require.Len(t, batch, 3)
	require.True(t, batch[1].Duplicate)
	require.Equal(t, batch[0].ID, batch[1].ID)
	st := stats(t, c, "q1")
	require.Equal(t, client.QueueStats{Available: 2, Delayed: 1, OldestAgeSeconds: st.OldestAgeSeconds}, st)

	ms, err := c.Receive(ctx, "q1", client.Receive{MaxMessages: 10, VisibilityTimeoutSeconds: 60, WaitSeconds: 1})
	require.NoError(t, err)
	require.Len(t, ms, 2)
	if ms[0].ID != one.ID {
		ms[0], ms[1] = ms[1], ms[0]
	}
	require.Equal(t, one.ID, ms[0].ID)
	require.JSONEq(t, `{"n":1}`, string(ms[0].Body))
	require.Equal(t, "g", *ms[0].Group)
	require.Equal(t, "t", ms[0].Attributes["type"])
	require.Equal(t, 1, ms[0].ReceiveCount)

	res, err := c.Extend(ctx, "q1", 90*time.Second, ms[0].Receipt, ms[1].Receipt)
	require.NoError(t, err)
	require.Equal(t, []client.ReceiptResult{{Receipt: ms[0].Receipt, Status: "ok"}, {Receipt: ms[1].Receipt, Status: "ok"}}, res)
	res, err = c.Ack(ctx, "q1", ms[0].Receipt)
	require.NoError(t, err)
	require.Equal(t, "ok", res[0].Status)
	res, err = c.Ack(ctx, "q1", ms[0].Receipt)
	require.NoError(t, err)
	require.Equal(t, "stale", res[0].Status, "a receipt acks once")

	res, err = c.Nack(ctx, "q1", client.Nack{DelaySeconds: client.Ptr(0), Error: "later"}, ms[1].Receipt)
	require.NoError(t, err)
	require.Equal(t, "ok", res[0].Status)
	again, err := c.Receive(ctx, "q1", client.Receive{WaitSeconds: 5})
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, ms[1].ID, again[0].ID)
	require.Equal(t, 2, again[0].ReceiveCount)
	_, err = c.Nack(ctx, "q1", client.Nack{DeadLetter: true, Error: "poison"}, again[0].Receipt)
	require.NoError(t, err)

	dl, err := c.ListDeadLetters(ctx, "q1", client.Page{Limit: 10})
	require.NoError(t, err)
	require.Len(t, dl.Messages, 1)
	require.Equal(t, "poison", *dl.Messages[0].LastError)
	require.Nil(t, dl.Next)
	n, err := c.RedriveDeadLetters(ctx, "q1", client.Redrive{IDs: []string{ms[1].ID}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.EqualValues(t, 1, stats(t, c, "q1").Available)
	back, err := c.Receive(ctx, "q1", client.Receive{})
	require.NoError(t, err)
	_, err = c.Nack(ctx, "q1", client.Nack{DeadLetter: true}, back[0].Receipt)
	require.NoError(t, err)
	n, err = c.RedriveDeadLetters(ctx, "q1", client.Redrive{Limit: 10})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	back, err = c.Receive(ctx, "q1", client.Receive{})
	require.NoError(t, err)
	_, err = c.Nack(ctx, "q1", client.Nack{DeadLetter: true}, back[0].Receipt)
	require.NoError(t, err)
	require.NoError(t, c.PurgeDeadLetters(ctx, "q1"))
	require.Zero(t, stats(t, c, "q1").DeadLetters)

	require.NoError(t, c.PurgeQueue(ctx, "q1"))
	require.Equal(t, client.QueueStats{}, stats(t, c, "q1"), "purge drops the delayed message too")
	require.NoError(t, c.DeleteQueue(ctx, "q1"))
	_, err = c.GetQueue(ctx, "q1")
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusNotFound, e.Status)
	require.Equal(t, "not_found", e.Code)
	require.NotEmpty(t, e.Title)
	require.NotEmpty(t, e.Detail)
	require.Contains(t, string(e.Raw), `"not_found"`)
	require.True(t, client.IsCode(err, "not_found"))
}

// TestErrorFields decodes a 400's field errors; this client checks answers
// only, since the request is invalid on purpose.
func TestErrorFields(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	c := client.New(env.URL, ferrytest.AdminKey, client.WithHTTPClient(openapitest.New(t).Client(t, nil)))
	ctx := context.Background()
	_, _, err := c.PutQueue(ctx, "q", client.QueueConfig{})
	require.NoError(t, err)
	_, err = c.Receive(ctx, "q", client.Receive{MaxMessages: 500})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusBadRequest, e.Status)
	require.Equal(t, "invalid_request", e.Code)
	require.NotEmpty(t, e.Errors)
	require.Equal(t, "max_messages", e.Errors[0].Field)
	require.False(t, e.Temporary())

	bad := client.New(env.URL, "wrong-key")
	_, err = bad.GetQueue(ctx, "q")
	require.True(t, client.IsCode(err, "unauthorized"), "%v", err)
}

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
