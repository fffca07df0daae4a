package sqs_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

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
