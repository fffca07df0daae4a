package sqs_test

import (
	"context"
	"encoding/xml"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestLongPollWoken: a ReceiveMessage that waits is woken by a send (the
// REST wake path), not by the end of its wait.
func TestLongPollWoken(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	url := createQueue(t, c, "poll", nil)
	type result struct {
		out  *awssqs.ReceiveMessageOutput
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 20})
		done <- result{out, err, time.Since(start)}
	}()
	ferrytest.WaitFor(t, 10*time.Second, "the receive to wait", func() bool { return env.Server.LongPollsParked() > 0 })
	sentAt := time.Now()
	_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("wake")})
	require.NoError(t, err)
	r := <-done
	require.NoError(t, r.err)
	require.Len(t, r.out.Messages, 1)
	require.Equal(t, "wake", *r.out.Messages[0].Body)
	require.Less(t, time.Since(sentAt), 5*time.Second, "woken by the send, not the 20 s wait")
}

// TestVisibilityTimeoutZero: 0 works as on SQS in each of its three
// places. A queue's VisibilityTimeout 0 (REST's visibility_timeout_seconds
// 0) and a ReceiveMessage's VisibilityTimeout 0 receive a message (its
// ApproximateReceiveCount grows) and leave it visible at once, so the next
// receive gets it again (and DeleteMessage deletes it with the latest
// receive's handle only); ChangeMessageVisibility(Batch) 0 makes a hidden
// message visible at once. Out of 0–43200 is InvalidParameterValue. REST
// and ferry.receive take the same 0 (one engine); a subscription, whose
// deliveries need a lease, keeps its minimum of 1. (aws-sdk-go-v2 leaves
// a ReceiveMessage's VisibilityTimeout of 0 out of its request, as the
// zero value of an int32 member, so that receive is a Query protocol
// request signed by its signer.)
func TestVisibilityTimeoutZero(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	receive := func(q *string, vt int32) []types.Message {
		t.Helper()
		out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q, VisibilityTimeout: vt,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
		require.NoError(t, err)
		return out.Messages
	}
	count := func(m types.Message) string { return m.Attributes["ApproximateReceiveCount"] }
	// receiveZero is a ReceiveMessage with VisibilityTimeout 0: the count
	// of its messages and their ApproximateReceiveCounts.
	receiveZero := func(q *string) []string {
		t.Helper()
		status, body := queryRequest{path: strings.TrimPrefix(*q, env.URL), params: url.Values{"Action": {"ReceiveMessage"},
			"VisibilityTimeout": {"0"}, "AttributeName.1": {"All"}}}.do(t, env, nil)
		require.Equal(t, http.StatusOK, status, "%s", body)
		var out struct {
			Messages []struct {
				Attributes []struct{ Name, Value string } `xml:"Attribute"`
			} `xml:"ReceiveMessageResult>Message"`
		}
		require.NoError(t, xml.Unmarshal(body, &out))
		var counts []string
		for _, m := range out.Messages {
			for _, a := range m.Attributes {
				if a.Name == "ApproximateReceiveCount" {
					counts = append(counts, a.Value)
				}
			}
		}
		require.Len(t, counts, len(out.Messages), "%s", body)
		return counts
	}

	zero := createQueue(t, c, "vt-zero", map[string]string{"VisibilityTimeout": "0"})
	ga, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: zero, AttributeNames: []types.QueueAttributeName{"VisibilityTimeout"}})
	require.NoError(t, err)
	require.Equal(t, "0", ga.Attributes["VisibilityTimeout"])
	require.EqualValues(t, 0, env.Do(http.MethodGet, "/v1/queues/vt-zero", nil).Map(t)["visibility_timeout_seconds"])
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: zero, MessageBody: aws.String("peek")})
	require.NoError(t, err)
	var handles []*string
	for i := range 3 {
		got := receive(zero, 0)
		require.Len(t, got, 1, "receive %d: visible at once", i+1)
		require.Equal(t, strconv.Itoa(i+1), count(got[0]))
		handles = append(handles, got[0].ReceiptHandle)
	}
	// As on SQS, DeleteMessage deletes it with the latest receive's
	// handle (nobody received it since), not with an earlier one.
	_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: zero, ReceiptHandle: handles[1]})
	require.NoError(t, err)
	require.EqualValues(t, 1, restHeld(t, env, "vt-zero"), "a handle of an earlier receive deleted the message")
	_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: zero, ReceiptHandle: handles[2]})
	require.NoError(t, err)
	require.EqualValues(t, 0, restHeld(t, env, "vt-zero"), "the latest receive's handle deletes the message")
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: zero, MessageBody: aws.String("peek")})
	require.NoError(t, err)
	// A receive's own timeout wins over the queue's 0.
	got := receive(zero, 30)
	require.Len(t, got, 1)
	require.Empty(t, receive(zero, 0), "hidden for 30 s")
	_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: zero, ReceiptHandle: got[0].ReceiptHandle})
	require.NoError(t, err)

	q := createQueue(t, c, "vt-thirty", nil)
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("m")})
	require.NoError(t, err)
	require.Equal(t, []string{"1"}, receiveZero(q))
	require.Equal(t, []string{"2"}, receiveZero(q), "a receive with VisibilityTimeout 0 leaves it visible")
	got = receive(q, 0) // the queue's 30 s
	require.Len(t, got, 1)
	require.Empty(t, receive(q, 0))
	cb, err := c.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: q,
		Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("a"), ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 0}}})
	require.NoError(t, err)
	require.Len(t, cb.Successful, 1)
	got = receive(q, 0)
	require.Len(t, got, 1, "ChangeMessageVisibilityBatch 0: visible at once")
	_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q, ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 0})
	require.NoError(t, err)
	got = receive(q, 0)
	require.Len(t, got, 1, "ChangeMessageVisibility 0: visible at once")
	require.Equal(t, "5", count(got[0]))

	for _, bad := range []int32{-1, 43201} {
		_, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q, VisibilityTimeout: bad})
		requireCode(t, err, "InvalidParameterValue")
	}
	_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q, ReceiptHandle: got[0].ReceiptHandle})
	require.NoError(t, err)
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("n")})
	require.NoError(t, err)
	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q, Attributes: map[string]string{"VisibilityTimeout": "-1"}})
	require.Error(t, err)
	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q, Attributes: map[string]string{"VisibilityTimeout": "0"}})
	require.NoError(t, err)
	require.EqualValues(t, 0, env.Do(http.MethodGet, "/v1/queues/vt-thirty", nil).Map(t)["visibility_timeout_seconds"])

	// REST: the queue's 0 and a receive's 0 (answers checked against the spec).
	r := env.Do(http.MethodPost, "/v1/queues/vt-thirty/receive", map[string]any{"visibility_timeout_seconds": 0})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Len(t, r.Map(t)["messages"], 1)
	r = env.Do(http.MethodPost, "/v1/queues/vt-thirty/receive", map[string]any{})
	require.Len(t, r.Map(t)["messages"], 1, "the queue's 0: visible at once")
	require.Equal(t, http.StatusCreated, env.Do(http.MethodPut, "/v1/topics/vt", map[string]any{}).Status)
	r = env.Do(http.MethodPut, "/v1/topics/vt/subscriptions/s", map[string]any{"visibility_timeout_seconds": 0})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)

	// ferry.receive: the same 0, the message visible again once committed.
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for i := range 2 {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM ferry.receive('vt-thirty', 1, 0)`).Scan(&n))
		require.Equal(t, 1, n, "ferry.receive %d", i+1)
	}
	_, err = conn.Exec(ctx, `SELECT * FROM ferry.receive('vt-thirty', 1, -1)`)
	require.ErrorContains(t, err, "visibility_timeout_seconds: must be between 0 and 43200")
}
