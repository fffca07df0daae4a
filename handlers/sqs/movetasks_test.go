package sqs_test

import (
	"context"
	"encoding/xml"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

// dlqPair makes the queue src whose RedrivePolicy targets the queue dlq,
// with n messages sent straight into dlq; it answers their QueueUrls.
func dlqPair(t *testing.T, c *awssqs.Client, src, dlq string, n int) (string, string) {
	t.Helper()
	ctx := context.Background()
	d, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(dlq)})
	require.NoError(t, err)
	s, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(src), Attributes: map[string]string{
		"RedrivePolicy": `{"maxReceiveCount":3,"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:` + dlq + `"}`}})
	require.NoError(t, err)
	for i := range n {
		_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: d.QueueUrl, MessageBody: aws.String("m" + strconv.Itoa(i))})
		require.NoError(t, err)
	}
	return *s.QueueUrl, *d.QueueUrl
}

// arn is the ARN of a queue, as the client signs for us-east-1.
func arn(name string) *string { return aws.String("arn:aws:sqs:us-east-1:000000000000:" + name) }

// awaitTask waits until the source's newest task has a final status and
// answers it.
func awaitTask(t *testing.T, c *awssqs.Client, source string) types.ListMessageMoveTasksResultEntry {
	t.Helper()
	var last types.ListMessageMoveTasksResultEntry
	require.Eventually(t, func() bool {
		out, err := c.ListMessageMoveTasks(context.Background(), &awssqs.ListMessageMoveTasksInput{SourceArn: arn(source)})
		require.NoError(t, err)
		require.Len(t, out.Results, 1)
		last = out.Results[0]
		return *last.Status != "RUNNING" && *last.Status != "CANCELLING"
	}, 20*time.Second, 10*time.Millisecond)
	return last
}

// receiveAll receives (and deletes) every message of the queue; their
// bodies.
func receiveAll(t *testing.T, c *awssqs.Client, url string) []string {
	t.Helper()
	var bodies []string
	for {
		got, err := c.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
		require.NoError(t, err)
		if len(got.Messages) == 0 {
			return bodies
		}
		for _, m := range got.Messages {
			bodies = append(bodies, *m.Body)
			_, err := c.DeleteMessage(context.Background(), &awssqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle})
			require.NoError(t, err)
		}
	}
}

// TestMessageMoveTask: a task without DestinationArn moves a dead-letter
// queue's messages back into its source queue, where they are received in
// send order; ListMessageMoveTasks shows it COMPLETED with its counts and
// ARNs, without a handle; a completed task cannot be cancelled; a queue
// that is no dead-letter queue, an unknown handle, a rate over 500 and a
// key without manage are refused.
func TestMessageMoveTask(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	srcURL, dlqURL := dlqPair(t, c, "orders-jobs", "orders-dlq", 25)

	started, err := c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: arn("orders-dlq")})
	require.NoError(t, err)
	require.NotEmpty(t, *started.TaskHandle)
	done := awaitTask(t, c, "orders-dlq")
	require.Equal(t, "COMPLETED", *done.Status)
	require.EqualValues(t, 25, done.ApproximateNumberOfMessagesMoved)
	require.EqualValues(t, 25, *done.ApproximateNumberOfMessagesToMove)
	require.Equal(t, *arn("orders-dlq"), *done.SourceArn)
	require.Equal(t, *arn("orders-jobs"), *done.DestinationArn)
	require.Nil(t, done.TaskHandle, "SQS answers a handle only while the task runs")
	require.InDelta(t, time.Now().UnixMilli(), done.StartedTimestamp, float64(time.Minute.Milliseconds()))

	bodies := receiveAll(t, c, srcURL)
	require.Len(t, bodies, 25)
	require.Equal(t, "m0", bodies[0])
	require.Equal(t, "m24", bodies[24])
	require.Empty(t, receiveAll(t, c, dlqURL))

	_, err = c.CancelMessageMoveTask(ctx, &awssqs.CancelMessageMoveTaskInput{TaskHandle: started.TaskHandle})
	requireCode(t, err, "AWS.SimpleQueueService.UnsupportedOperation")
	_, err = c.CancelMessageMoveTask(ctx, &awssqs.CancelMessageMoveTaskInput{TaskHandle: aws.String("mt_nope")})
	var nf *types.ResourceNotFoundException
	require.ErrorAs(t, err, &nf)
	_, err = c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: arn("orders-jobs")})
	requireCode(t, err, "InvalidParameterValue")
	_, err = c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: arn("orders-dlq"),
		MaxNumberOfMessagesPerSecond: aws.Int32(501)})
	requireCode(t, err, "InvalidParameterValue")
	_, err = c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: arn("orders-nothere")})
	require.ErrorAs(t, err, &nf)
	scoped := client(env, scopedID, scopedSecret) // send and read on orders-*: no manage
	_, err = scoped.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: arn("orders-dlq")})
	requireCode(t, err, "AccessDenied")
	_, err = scoped.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: arn("orders-dlq")})
	requireCode(t, err, "AccessDenied")
}

// TestMessageMoveTaskCancel: a task at MaxNumberOfMessagesPerSecond 1
// moves one message a second into its DestinationArn; it lists RUNNING
// with its handle and rate; a second task on the source is refused while
// it runs; a Cancel stops it (CANCELLED) with the messages moved so far in
// the destination, receivable, and the rest still in the source.
func TestMessageMoveTaskCancel(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	_, dlqURL := dlqPair(t, c, "jobs", "jobs-dlq", 5)
	dest, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("jobs-retry")})
	require.NoError(t, err)

	started, err := c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: arn("jobs-dlq"),
		DestinationArn: arn("jobs-retry"), MaxNumberOfMessagesPerSecond: aws.Int32(1)})
	require.NoError(t, err)
	list, err := c.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: arn("jobs-dlq"), MaxResults: aws.Int32(10)})
	require.NoError(t, err)
	require.Len(t, list.Results, 1)
	running := list.Results[0]
	require.Equal(t, "RUNNING", *running.Status, "5 messages at 1 a second take 4 seconds at least")
	require.Equal(t, *started.TaskHandle, *running.TaskHandle)
	require.EqualValues(t, 1, *running.MaxNumberOfMessagesPerSecond)
	require.EqualValues(t, 5, *running.ApproximateNumberOfMessagesToMove)
	_, err = c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: arn("jobs-dlq"), DestinationArn: arn("jobs-retry")})
	requireCode(t, err, "AWS.SimpleQueueService.UnsupportedOperation")

	_, err = c.CancelMessageMoveTask(ctx, &awssqs.CancelMessageMoveTaskInput{TaskHandle: started.TaskHandle})
	require.NoError(t, err)
	done := awaitTask(t, c, "jobs-dlq")
	require.Equal(t, "CANCELLED", *done.Status)
	moved := int(done.ApproximateNumberOfMessagesMoved)
	require.Less(t, moved, 5)
	got := receiveAll(t, c, *dest.QueueUrl)
	require.Len(t, got, moved)
	require.Len(t, receiveAll(t, c, dlqURL), 5-moved)
}

// TestMessageMoveTaskQuery: the move task actions over the Query protocol:
// StartMessageMoveTask's rate is read (a List shows it), and the List
// answers SQS's XML, its entries as ListMessageMoveTasksResultEntry.
func TestMessageMoveTaskQuery(t *testing.T) {
	t.Parallel()
	env := start(t)
	c := admin(env)
	dlqPair(t, c, "mail", "mail-dlq", 1)
	status, body := queryRequest{params: url.Values{"Action": {"StartMessageMoveTask"},
		"SourceArn": {*arn("mail-dlq")}, "MaxNumberOfMessagesPerSecond": {"7"}}}.do(t, env, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var started struct {
		Result struct{ TaskHandle string } `xml:"StartMessageMoveTaskResult"`
	}
	require.NoError(t, xml.Unmarshal(body, &started), "%s", body)
	require.NotEmpty(t, started.Result.TaskHandle, "%s", body)
	awaitTask(t, c, "mail-dlq")
	status, body = queryRequest{params: url.Values{"Action": {"ListMessageMoveTasks"},
		"SourceArn": {*arn("mail-dlq")}}}.do(t, env, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var list struct {
		Result struct {
			Entries []struct {
				Status                           string
				SourceArn, DestinationArn        string
				ApproximateNumberOfMessagesMoved int
				MaxNumberOfMessagesPerSecond     int
			} `xml:"ListMessageMoveTasksResultEntry"`
		} `xml:"ListMessageMoveTasksResult"`
	}
	require.NoError(t, xml.Unmarshal(body, &list), "%s", body)
	require.Len(t, list.Result.Entries, 1, "%s", body)
	e := list.Result.Entries[0]
	require.Equal(t, "COMPLETED", e.Status)
	require.Equal(t, *arn("mail"), e.DestinationArn)
	require.Equal(t, 1, e.ApproximateNumberOfMessagesMoved)
	require.Equal(t, 7, e.MaxNumberOfMessagesPerSecond)
}

// deadLetter sends the bodies to the queue at url, whose RedrivePolicy has
// maxReceiveCount 1, and dead-letters each: received once, then made
// visible again, which ends its last allowed receive.
func deadLetter(t *testing.T, c *awssqs.Client, url string, bodies ...string) {
	t.Helper()
	ctx := context.Background()
	for _, b := range bodies {
		_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(b)})
		require.NoError(t, err)
	}
	got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
	require.NoError(t, err)
	require.Len(t, got.Messages, len(bodies))
	for _, m := range got.Messages {
		_, err := c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		require.NoError(t, err)
	}
}

// TestMessageMoveTaskBackToEachSource: without DestinationArn, a task on
// a dead-letter queue of several source queues moves each message back to
// the queue it was dead-lettered from, as SQS; a message that came from
// none (sent to the dead-letter queue itself) stays; the task lists no
// DestinationArn.
func TestMessageMoveTaskBackToEachSource(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	aURL, dlqURL := dlqPair(t, c, "orders-a", "orders-dead", 0)
	policy := `{"maxReceiveCount":1,"deadLetterTargetArn":"` + *arn("orders-dead") + `"}`
	_, err := c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: &aURL, Attributes: map[string]string{"RedrivePolicy": policy}})
	require.NoError(t, err)
	b, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-b"), Attributes: map[string]string{"RedrivePolicy": policy}})
	require.NoError(t, err)
	deadLetter(t, c, aURL, "a0", "a1")
	deadLetter(t, c, *b.QueueUrl, "b0", "b1", "b2")
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: &dlqURL, MessageBody: aws.String("direct")})
	require.NoError(t, err)
	require.EqualValues(t, 6, restHeld(t, env, "orders-dead"))

	_, err = c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: arn("orders-dead")})
	require.NoError(t, err)
	done := awaitTask(t, c, "orders-dead")
	require.Equal(t, "COMPLETED", *done.Status)
	require.EqualValues(t, 5, done.ApproximateNumberOfMessagesMoved)
	require.Nil(t, done.DestinationArn)
	require.ElementsMatch(t, []string{"a0", "a1"}, receiveAll(t, c, aURL))
	require.ElementsMatch(t, []string{"b0", "b1", "b2"}, receiveAll(t, c, *b.QueueUrl))
	require.Equal(t, []string{"direct"}, receiveAll(t, c, dlqURL))
}

// TestMoveTaskJoinedAtShutdown: a running move task's goroutine has ended
// when the server's Shutdown returns (it is joined before the pool
// closes). Not parallel: it reads every goroutine's stack, and parallel
// tests, which may run tasks of their own, start after it.
func TestMoveTaskJoinedAtShutdown(t *testing.T) {
	env := start(t)
	c, ctx := admin(env), context.Background()
	dlqPair(t, c, "orders-slow", "orders-slow-dlq", 10)
	_, err := c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: arn("orders-slow-dlq"),
		MaxNumberOfMessagesPerSecond: aws.Int32(1)})
	require.NoError(t, err)
	out, err := c.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: arn("orders-slow-dlq")})
	require.NoError(t, err)
	require.Equal(t, "RUNNING", *out.Results[0].Status)
	require.Contains(t, stacks(), "(*face).runMove")
	env.Stop()
	require.NotContains(t, stacks(), "(*face).runMove")
}

// stacks is every goroutine's stack.
func stacks() string {
	buf := make([]byte, 8<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
