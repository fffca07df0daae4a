package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
)

// coverQueues: the queue routes the queue tests leave out (move, push).
func coverQueues(t *testing.T, c *client.Client, hook string) {
	ctx := context.Background()
	putQueue(t, c, "src", client.QueueConfig{})
	putQueue(t, c, "dst", client.QueueConfig{})
	send(t, c, "src", "a")
	send(t, c, "src", "b")
	peekClaimsNothing(t, c)
	moved, err := c.MoveMessages(ctx, "src", "dst", 0)
	require.NoError(t, err)
	require.EqualValues(t, 2, moved)
	require.EqualValues(t, 2, stats(t, c, "dst").Available)

	q, created, err := c.PutQueue(ctx, "hooked", client.QueueConfig{Push: &client.PushConfig{URL: hook + "/q"}})
	require.NoError(t, err)
	require.True(t, created)
	require.True(t, strings.HasPrefix(q.SigningSecret, "whsec_"))
	require.Equal(t, hook+"/q", q.Push.URL)
	rot, err := c.RotateQueueSecret(ctx, "hooked")
	require.NoError(t, err)
	require.NotEqual(t, q.SigningSecret, rot.SigningSecret)
	require.True(t, rot.PreviousSecretExpires.After(time.Now()))
	require.NoError(t, c.EnableQueuePush(ctx, "hooked"))
	send(t, c, "hooked", "pushed")
	require.Eventually(t, func() bool {
		as, err := c.ListQueuePushAttempts(ctx, "hooked", client.Attempts{Status: "succeeded"})
		require.NoError(t, err)
		return len(as) == 1 && as[0].StatusCode != nil && *as[0].StatusCode == http.StatusNoContent
	}, 15*time.Second, 20*time.Millisecond)

	q, _, err = c.PutQueue(ctx, "hooked", client.QueueConfig{RemovePush: true, DeadLetterQueue: client.Ptr("dst")})
	require.NoError(t, err)
	require.Nil(t, q.Push)
	require.Equal(t, "dst", *q.DeadLetterQueue)
	q, _, err = c.PutQueue(ctx, "hooked", client.QueueConfig{DeadLetterQueue: client.Ptr("")})
	require.NoError(t, err)
	require.Nil(t, q.DeadLetterQueue)
	ms, err := c.Receive(ctx, "dst", client.Receive{MaxMessages: 1})
	require.NoError(t, err)
	_, err = c.Extend(ctx, "dst", time.Minute, ms[0].Receipt)
	require.NoError(t, err)
	_, err = c.Nack(ctx, "dst", client.Nack{DeadLetter: true}, ms[0].Receipt)
	require.NoError(t, err)
	dl, err := c.ListDeadLetters(ctx, "dst", client.Page{})
	require.NoError(t, err)
	require.Len(t, dl.Messages, 1)
	n, err := c.RedriveDeadLetters(ctx, "dst", client.Redrive{IDs: []string{dl.Messages[0].ID}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, c.PurgeDeadLetters(ctx, "dst"))
	ms, err = c.Receive(ctx, "dst", client.Receive{MaxMessages: 10})
	require.NoError(t, err)
	require.Len(t, ms, 2)
	res, err := c.Ack(ctx, "dst", ms[0].Receipt)
	require.NoError(t, err)
	require.Equal(t, "ok", res[0].Status)
	require.NoError(t, c.PurgeQueue(ctx, "dst"))
	require.Equal(t, client.QueueStats{}, stats(t, c, "dst"))
	l, err := c.ListQueues(ctx, client.Page{})
	require.NoError(t, err)
	require.Len(t, l.Queues, 3)
	require.NoError(t, c.DeleteQueue(ctx, "src"))
}

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

// peekClaimsNothing: a peek of src shows its two messages without claiming
// them (receive_count stays 0 and both are still receivable), pages with
// After, and filters by State.
func peekClaimsNothing(t *testing.T, c *client.Client) {
	ctx := context.Background()
	first, err := c.PeekMessages(ctx, "src", client.PeekOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, first.Messages, 1)
	require.JSONEq(t, `"a"`, string(first.Messages[0].Body))
	require.Equal(t, "available", first.Messages[0].State)
	require.Zero(t, first.Messages[0].ReceiveCount)
	require.NotNil(t, first.Next)
	second, err := c.PeekMessages(ctx, "src", client.PeekOptions{Limit: 1, After: *first.Next})
	require.NoError(t, err)
	require.Len(t, second.Messages, 1)
	require.JSONEq(t, `"b"`, string(second.Messages[0].Body))
	inFlight, err := c.PeekMessages(ctx, "src", client.PeekOptions{State: "in_flight"})
	require.NoError(t, err)
	require.Empty(t, inFlight.Messages)
	require.EqualValues(t, 2, stats(t, c, "src").Available)

	ms, err := c.Receive(ctx, "src", client.Receive{MaxMessages: 10, VisibilityTimeoutSeconds: 60})
	require.NoError(t, err)
	require.Len(t, ms, 2, "peeked messages are still receivable")
	require.Equal(t, []int{1, 1}, []int{ms[0].ReceiveCount, ms[1].ReceiveCount}, "a peek counts no receive")
	inFlight, err = c.PeekMessages(ctx, "src", client.PeekOptions{State: "in_flight"})
	require.NoError(t, err)
	require.Len(t, inFlight.Messages, 2)
	require.Nil(t, inFlight.Next)
	_, err = c.Nack(ctx, "src", client.Nack{DelaySeconds: client.Ptr(0)}, ms[0].Receipt, ms[1].Receipt)
	require.NoError(t, err)
}

// TestQueueSettingsRoundTrip: receive_wait_seconds, max_message_size,
// content_based_dedup and tags go to a real Ferry and come back; content
// dedup takes effect; an empty, non-nil Tags removes the tags while a nil
// one leaves them.
func TestQueueSettingsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c, _ := setup(t)
	q, _, err := c.PutQueue(ctx, "q", client.QueueConfig{
		ReceiveWaitSeconds: client.Ptr(3), MaxMessageSize: client.Ptr(2048),
		ContentBasedDedup: client.Ptr(true), Tags: map[string]string{"team": "billing"},
	})
	require.NoError(t, err)
	require.Equal(t, 3, q.ReceiveWaitSeconds)
	require.Equal(t, 2048, q.MaxMessageSize)
	require.True(t, q.ContentBasedDedup)
	require.Equal(t, map[string]string{"team": "billing"}, q.Tags)

	a, err := c.Send(ctx, "q", client.SendMessage{Body: "same"})
	require.NoError(t, err)
	b, err := c.Send(ctx, "q", client.SendMessage{Body: "same"})
	require.NoError(t, err)
	require.Equal(t, client.Sent{ID: a.ID, Duplicate: true}, b, "content-based dedup")

	q, _, err = c.PutQueue(ctx, "q", client.QueueConfig{MaxMessageSize: client.Ptr(0)})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"team": "billing"}, q.Tags, "nil Tags leaves them")
	require.Zero(t, q.MaxMessageSize)
	q, _, err = c.PutQueue(ctx, "q", client.QueueConfig{Tags: map[string]string{}})
	require.NoError(t, err)
	require.Empty(t, q.Tags)
	got, err := c.GetQueue(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, 3, got.ReceiveWaitSeconds)
	require.True(t, got.ContentBasedDedup)
}

// TestAllWalksEveryPage: All lists every item of a list page after page,
// from the given cursor, and stops at the first error.
func TestAllWalksEveryPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c, rec := setup(t)
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		putQueue(t, c, name, client.QueueConfig{})
	}
	all, err := client.All[client.Queue](ctx, client.Page{Limit: 2}, c.ListQueues)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, names(all))
	require.Equal(t, 3, rec.count("GET queues OK"), "three pages of two")

	first, err := c.ListQueues(ctx, client.Page{Limit: 2})
	require.NoError(t, err)
	after, err := client.All[client.Queue](ctx, client.Page{Limit: 2, After: *first.Next}, c.ListQueues)
	require.NoError(t, err)
	require.Equal(t, []string{"c", "d", "e"}, names(after))

	_, err = client.All[client.EventDeadLetter](ctx, client.Page{}, func(ctx context.Context, p client.Page) (*client.EventDeadLetterPage, error) {
		return c.ListSubscriptionDeadLetters(ctx, "no-topic", "no-sub", p)
	})
	require.True(t, client.IsCode(err, "not_found"), "%v", err)
}

func names(qs []client.Queue) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = q.Name
	}
	return out
}
