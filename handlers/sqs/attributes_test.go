package sqs_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

// TestWaitAndSizeAttributes: ReceiveMessageWaitTimeSeconds and
// MaximumMessageSize are the REST queue's receive_wait_seconds and
// max_message_size, set and read over either face and over both
// protocols; a ReceiveMessage without WaitTimeSeconds long-polls for the
// queue's wait; a message of exactly MaximumMessageSize bytes (SQS's
// measure) is taken and one byte more is refused.
func TestWaitAndSizeAttributes(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()

	q := createQueue(t, c, "orders-wait", map[string]string{"ReceiveMessageWaitTimeSeconds": "2", "MaximumMessageSize": "2048"})
	r := env.Do(http.MethodGet, "/v1/queues/orders-wait", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.EqualValues(t, 2, r.Map(t)["receive_wait_seconds"])
	require.EqualValues(t, 2048, r.Map(t)["max_message_size"])
	ga, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: q, AttributeNames: []types.QueueAttributeName{"All"}})
	require.NoError(t, err)
	require.Equal(t, "2", ga.Attributes["ReceiveMessageWaitTimeSeconds"])
	require.Equal(t, "2048", ga.Attributes["MaximumMessageSize"])
	_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-wait"), Attributes: map[string]string{"ReceiveMessageWaitTimeSeconds": "3"}})
	requireCode(t, err, "QueueAlreadyExists")

	began := time.Now()
	got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q})
	require.NoError(t, err)
	require.Empty(t, got.Messages)
	require.GreaterOrEqual(t, time.Since(began), 1900*time.Millisecond, "the queue's wait applies")
	began = time.Now()
	_, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 0})
	require.NoError(t, err)
	// aws-sdk-go-v2 omits a zero WaitTimeSeconds: the queue's wait applies
	// again, as on SQS; the Query request below gives 0 explicitly.
	require.GreaterOrEqual(t, time.Since(began), 1900*time.Millisecond)
	began = time.Now()
	status, body := queryRequest{params: url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {*q}, "WaitTimeSeconds": {"0"}}}.do(t, env, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Less(t, time.Since(began), 1900*time.Millisecond, "WaitTimeSeconds=0 answers at once")

	attr := map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("vv")}}
	fit := strings.Repeat("x", 2048-len("k")-len("String")-len("vv"))
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String(fit), MessageAttributes: attr})
	require.NoError(t, err, "exactly MaximumMessageSize fits")
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String(fit + "x"), MessageAttributes: attr})
	requireCode(t, err, "InvalidParameterValue")

	// Set over the Query protocol, read back over REST; bad values refused.
	status, body = queryRequest{params: url.Values{"Action": {"SetQueueAttributes"}, "QueueUrl": {*q},
		"Attribute.1.Name": {"ReceiveMessageWaitTimeSeconds"}, "Attribute.1.Value": {"0"},
		"Attribute.2.Name": {"MaximumMessageSize"}, "Attribute.2.Value": {"262144"}}}.do(t, env, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	r = env.Do(http.MethodGet, "/v1/queues/orders-wait", nil)
	require.EqualValues(t, 0, r.Map(t)["receive_wait_seconds"])
	require.EqualValues(t, 262144, r.Map(t)["max_message_size"])
	for k, v := range map[string]string{"ReceiveMessageWaitTimeSeconds": "21", "MaximumMessageSize": "1023"} {
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q, Attributes: map[string]string{k: v}})
		requireCode(t, err, "InvalidAttributeValue")
	}
}

// TestFullSizeBody: a body of 262,144 bytes of plain text, SQS's largest,
// is taken on a queue of the default size (the server's 256 KiB, though
// its stored form, a JSON string, is 2 bytes longer) and received byte for
// byte; 262,145 bytes are refused and write nothing.
func TestFullSizeBody(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	q := createQueue(t, c, "orders-big", nil)

	body := strings.Repeat("ferry ", 262144/6) + strings.Repeat("!", 262144%6)
	require.Len(t, body, 262144)
	_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String(body + "!")})
	requireCode(t, err, "InvalidParameterValue")
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String(body)})
	require.NoError(t, err)
	got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q, MaxNumberOfMessages: 10})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1, "only the message that fit was written")
	require.Equal(t, body, *got.Messages[0].Body)
}

// TestContentBasedDeduplication: a FIFO queue is made without content
// deduplication unless asked (as SQS), and then refuses a message without
// MessageDeduplicationId; turned on, the same body is one message, also
// when REST sends it as a string without dedup_id.
func TestContentBasedDeduplication(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	q := createQueue(t, c, "orders.fifo", map[string]string{"FifoQueue": "true"})

	ga, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: q, AttributeNames: []types.QueueAttributeName{"ContentBasedDeduplication"}})
	require.NoError(t, err)
	require.Equal(t, "false", ga.Attributes["ContentBasedDeduplication"])
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("invoice 7"), MessageGroupId: aws.String("g")})
	requireCode(t, err, "InvalidParameterValue")
	require.Zero(t, restHeld(t, env, "orders.fifo"))

	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q, Attributes: map[string]string{"ContentBasedDeduplication": "true"}})
	require.NoError(t, err)
	r := env.Do(http.MethodGet, "/v1/queues/orders.fifo", nil)
	require.Equal(t, true, r.Map(t)["content_based_dedup"])
	first, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("invoice 7"), MessageGroupId: aws.String("g")})
	require.NoError(t, err)
	again, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("invoice 7"), MessageGroupId: aws.String("g")})
	require.NoError(t, err)
	require.Equal(t, *first.MessageId, *again.MessageId)
	r = env.Do(http.MethodPost, "/v1/queues/orders.fifo/messages", map[string]any{"messages": []any{
		map[string]any{"body": "invoice 7", "group": "g"}}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"duplicate":true`)
	require.Contains(t, string(r.Body), *first.MessageId)
	require.EqualValues(t, 1, restHeld(t, env, "orders.fifo"))

	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q, Attributes: map[string]string{"ContentBasedDeduplication": "false"}})
	require.NoError(t, err)
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("invoice 8"), MessageGroupId: aws.String("g")})
	requireCode(t, err, "InvalidParameterValue")
}

// TestNoRedrivePolicy: a queue made over SQS without a RedrivePolicy never
// dead-letters, as on SQS (REST's max_receives 0): received and made
// visible again (ChangeMessageVisibility 0) far past Ferry's default 5,
// the message comes back each time, and GetQueueAttributes answers no
// RedrivePolicy. A policy set and then removed ("") leaves it so again.
func TestNoRedrivePolicy(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	q := createQueue(t, c, "orders-forever", nil)
	r := env.Do(http.MethodGet, "/v1/queues/orders-forever", nil)
	require.EqualValues(t, 0, r.Map(t)["max_receives"])
	ga, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: q, AttributeNames: []types.QueueAttributeName{"All"}})
	require.NoError(t, err)
	require.NotContains(t, ga.Attributes, "RedrivePolicy")

	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("again")})
	require.NoError(t, err)
	for i := range 12 {
		got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1, "receive %d", i+1)
		require.Equal(t, strconv.Itoa(i+1), got.Messages[0].Attributes["ApproximateReceiveCount"])
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q, ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 0})
		require.NoError(t, err)
	}

	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q, Attributes: map[string]string{"RedrivePolicy": `{"maxReceiveCount":3}`}})
	require.NoError(t, err)
	r = env.Do(http.MethodGet, "/v1/queues/orders-forever", nil)
	require.EqualValues(t, 3, r.Map(t)["max_receives"])
	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q, Attributes: map[string]string{"RedrivePolicy": ""}})
	require.NoError(t, err)
	r = env.Do(http.MethodGet, "/v1/queues/orders-forever", nil)
	require.EqualValues(t, 0, r.Map(t)["max_receives"])
	// A CreateQueue of it again without the policy is no difference.
	_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-forever")})
	require.NoError(t, err)
}

// TestRedrivePolicy: a RedrivePolicy with a deadLetterTargetArn is the
// REST dead_letter_queue; a message received maxReceiveCount times is
// moved into the target and received there through the SDK (its checksums
// validated); the target lists its source (ListDeadLetterSourceQueues);
// the queue itself as its target is refused.
func TestRedrivePolicy(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	dlq, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("jobs-dlq")})
	require.NoError(t, err)
	policy := `{"maxReceiveCount":1,"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:jobs-dlq"}`
	src, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("jobs"),
		Attributes: map[string]string{"RedrivePolicy": policy}})
	require.NoError(t, err)
	require.Equal(t, "jobs-dlq", env.Do(http.MethodGet, "/v1/queues/jobs", nil).Map(t)["dead_letter_queue"])
	ga, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: src.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy}})
	require.NoError(t, err)
	require.JSONEq(t, policy, ga.Attributes["RedrivePolicy"])

	sent, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: src.QueueUrl, MessageBody: aws.String("poison"),
		MessageAttributes: map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}}})
	require.NoError(t, err)
	got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: src.QueueUrl})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: src.QueueUrl,
		ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 0})
	require.NoError(t, err)
	// Its next receive dead-letters it instead: into jobs-dlq.
	got, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: src.QueueUrl})
	require.NoError(t, err)
	require.Empty(t, got.Messages)
	moved, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: dlq.QueueUrl, MessageAttributeNames: []string{"All"}})
	require.NoError(t, err)
	require.Len(t, moved.Messages, 1)
	require.Equal(t, *sent.MessageId, *moved.Messages[0].MessageId)
	require.Equal(t, "poison", *moved.Messages[0].Body)
	require.Equal(t, map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}},
		moved.Messages[0].MessageAttributes, "the sender's attributes only, as SQS")

	sources, err := c.ListDeadLetterSourceQueues(ctx, &awssqs.ListDeadLetterSourceQueuesInput{QueueUrl: dlq.QueueUrl})
	require.NoError(t, err)
	require.Equal(t, []string{*src.QueueUrl}, sources.QueueUrls)

	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: dlq.QueueUrl, Attributes: map[string]string{
		"RedrivePolicy": `{"maxReceiveCount":1,"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:jobs-dlq"}`}})
	var badValue *types.InvalidAttributeValue
	require.ErrorAs(t, err, &badValue)
	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: dlq.QueueUrl, Attributes: map[string]string{
		"RedrivePolicy": `{"maxReceiveCount":1,"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:jobs"}`}})
	require.ErrorAs(t, err, &badValue, "a cycle")
}
