package sqs_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

// TestBatches: per-entry answers, invalid entries failing alone, SQS's
// batch rules, and delete and visibility batches.
func TestBatches(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	url := createQueue(t, c, "batch", nil)
	entries := []types.SendMessageBatchRequestEntry{
		{Id: aws.String("a"), MessageBody: aws.String("one")},
		{Id: aws.String("b"), MessageBody: aws.String("two"), MessageAttributes: map[string]types.MessageAttributeValue{
			"AWS.reserved": {DataType: aws.String("String"), StringValue: aws.String("x")}}},
		{Id: aws.String("c"), MessageBody: aws.String("three"), DelaySeconds: 1000},
		{Id: aws.String("d"), MessageBody: aws.String("four")},
	}
	out, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: url, Entries: entries})
	require.NoError(t, err)
	require.Len(t, out.Successful, 2)
	require.Equal(t, []string{"a", "d"}, []string{*out.Successful[0].Id, *out.Successful[1].Id})
	require.Len(t, out.Failed, 2)
	for _, f := range out.Failed {
		require.True(t, f.SenderFault)
		require.Equal(t, "InvalidParameterValue", *f.Code)
	}
	require.EqualValues(t, 2, restHeld(t, env, "batch"))

	dup := []types.SendMessageBatchRequestEntry{{Id: aws.String("x"), MessageBody: aws.String("1")}, {Id: aws.String("x"), MessageBody: aws.String("2")}}
	_, err = c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: url, Entries: dup})
	var notDistinct *types.BatchEntryIdsNotDistinct
	require.ErrorAs(t, err, &notDistinct)
	many := make([]types.SendMessageBatchRequestEntry, 11)
	for i := range many {
		many[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String("m")}
	}
	_, err = c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: url, Entries: many})
	var tooMany *types.TooManyEntriesInBatchRequest
	require.ErrorAs(t, err, &tooMany)
	big := make([]byte, 200<<10)
	for i := range big {
		big[i] = 'x'
	}
	two := []types.SendMessageBatchRequestEntry{{Id: aws.String("p"), MessageBody: aws.String(string(big))}, {Id: aws.String("q"), MessageBody: aws.String(string(big))}}
	_, err = c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: url, Entries: two})
	var tooLong *types.BatchRequestTooLong
	require.ErrorAs(t, err, &tooLong)
	require.EqualValues(t, 2, restHeld(t, env, "batch"), "refused batches wrote nothing")

	got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 10})
	require.NoError(t, err)
	require.Len(t, got.Messages, 2)
	vis, err := c.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: url, Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
		{Id: aws.String("1"), ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 120},
		{Id: aws.String("2"), ReceiptHandle: aws.String("bogus"), VisibilityTimeout: 120},
	}})
	require.NoError(t, err)
	require.Len(t, vis.Successful, 1)
	require.Len(t, vis.Failed, 1)
	require.Equal(t, "ReceiptHandleIsInvalid", *vis.Failed[0].Code)
	del, err := c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: url, Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("1"), ReceiptHandle: got.Messages[0].ReceiptHandle},
		{Id: aws.String("2"), ReceiptHandle: got.Messages[1].ReceiptHandle},
		{Id: aws.String("3"), ReceiptHandle: aws.String("bogus")},
	}})
	require.NoError(t, err)
	require.Len(t, del.Successful, 2)
	require.Len(t, del.Failed, 1)
	require.EqualValues(t, 0, restHeld(t, env, "batch"))
	_, err = c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: url, Entries: []types.DeleteMessageBatchRequestEntry{}})
	var empty *types.EmptyBatchRequest
	require.ErrorAs(t, err, &empty)
}
