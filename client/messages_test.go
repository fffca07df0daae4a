package client_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// TestSendBatchAnswersInOrder: SendBatch's results follow the batch's
// order (a duplicate names the message it repeats), a batch with one bad
// message writes nothing, and Extend rounds a sub-second visibility up to
// the one second the server accepts.
func TestSendBatchAnswersInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, c, _ := setup(t)
	putQueue(t, c, "q", client.QueueConfig{})

	first, err := c.SendBatch(ctx, "q", []client.SendMessage{{Body: "a", DedupID: "a"}, {Body: "b", DedupID: "b"}})
	require.NoError(t, err)
	again, err := c.SendBatch(ctx, "q", []client.SendMessage{{Body: "b", DedupID: "b"}, {Body: "c", DedupID: "c"}, {Body: "a", DedupID: "a"}})
	require.NoError(t, err)
	require.Len(t, again, 3)
	require.Equal(t, client.Sent{ID: first[1].ID, Duplicate: true}, again[0])
	require.False(t, again[1].Duplicate)
	require.NotContains(t, []string{first[0].ID, first[1].ID}, again[1].ID)
	require.Equal(t, client.Sent{ID: first[0].ID, Duplicate: true}, again[2])

	// This client checks answers only: the request is invalid on purpose.
	unchecked := client.New(env.URL, ferrytest.AdminKey, client.WithHTTPClient(openapitest.New(t).Client(t, nil)))
	at := time.Now().Add(time.Hour)
	_, err = unchecked.SendBatch(ctx, "q", []client.SendMessage{{Body: "ok"}, {Body: "bad", DelaySeconds: client.Ptr(5), DeliverAt: &at}})
	require.True(t, client.IsCode(err, "invalid_request"), "%v", err)
	require.EqualValues(t, 3, stats(t, c, "q").Available, "a refused batch writes nothing")

	ms, err := c.Receive(ctx, "q", client.Receive{MaxMessages: 1, VisibilityTimeoutSeconds: 30})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	res, err := c.Extend(ctx, "q", 10*time.Millisecond, ms[0].Receipt)
	require.NoError(t, err)
	require.Equal(t, []client.ReceiptResult{{Receipt: ms[0].Receipt, Status: "ok"}}, res)
}

// TestReceiveNoWait: on a queue with a receive_wait_seconds, a Receive
// without WaitSeconds waits the queue's long poll and one with NoWait
// answers at once.
func TestReceiveNoWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c, _ := setup(t)
	putQueue(t, c, "slow", client.QueueConfig{ReceiveWaitSeconds: client.Ptr(2)})

	began := time.Now()
	ms, err := c.Receive(ctx, "slow", client.Receive{NoWait: true})
	require.NoError(t, err)
	require.Empty(t, ms)
	require.Less(t, time.Since(began), 1500*time.Millisecond, "NoWait answers at once")

	began = time.Now()
	ms, err = c.Receive(ctx, "slow", client.Receive{})
	require.NoError(t, err)
	require.Empty(t, ms)
	require.GreaterOrEqual(t, time.Since(began), 1900*time.Millisecond, "no WaitSeconds waits the queue's")
}

// TestReceiveVisible: a Receive with Visible claims a message and
// leaves it visible at once, so the next receive gets it again, counted.
func TestReceiveVisible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c, _ := setup(t)
	putQueue(t, c, "peekish", client.QueueConfig{})
	_, err := c.Send(ctx, "peekish", client.SendMessage{Body: "hello"})
	require.NoError(t, err)
	for want := 1; want <= 2; want++ {
		ms, err := c.Receive(ctx, "peekish", client.Receive{Visible: true, NoWait: true})
		require.NoError(t, err)
		require.Len(t, ms, 1, "receive %d finds it visible", want)
		require.Equal(t, want, ms[0].ReceiveCount)
	}
}

// TestRequestsReadBackFromJSON: the request types with a MarshalJSON of
// their own read back what it writes (a PUT body kept in a file, say).
func TestRequestsReadBackFromJSON(t *testing.T) {
	t.Parallel()
	for _, v := range []any{
		client.Receive{NoWait: true, MaxMessages: 3},
		client.Receive{WaitSeconds: 5},
		client.Receive{Visible: true, NoWait: true},
		client.Receive{VisibilityTimeoutSeconds: 30, MaxMessages: 10},
		client.QueueConfig{MaxReceives: client.Ptr(2), DeadLetterQueue: client.Ptr("dlq"), Tags: map[string]string{"a": "b"}},
		client.QueueConfig{DeadLetterQueue: client.Ptr(""), RemovePush: true, Tags: map[string]string{}},
		client.QueueConfig{Push: &client.PushConfig{URL: "http://127.0.0.1:1/x", MaxInFlight: client.Ptr(4)}},
		client.SubscriptionConfig{Ordered: client.Ptr(true), DeadLetterQueue: client.Ptr(""), RemovePush: true},
		client.SubscriptionConfig{Filter: &client.Filter{Types: []string{"a.*"}}, DeadLetterQueue: client.Ptr("dlq")},
	} {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		back := reflect.New(reflect.TypeOf(v))
		require.NoError(t, json.Unmarshal(raw, back.Interface()), "%s", raw)
		require.Equal(t, v, back.Elem().Interface(), "%s", raw)
	}
}
