package sqs_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQueueActions drives every queue action through aws-sdk-go-v2 (the
// JSON protocol): the queue it makes is a REST queue, and typed errors
// come out as the SDK models them.
func TestQueueActions(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()

	attrs := map[string]string{"VisibilityTimeout": "45", "DelaySeconds": "2", "MessageRetentionPeriod": "3600",
		"RedrivePolicy": `{"maxReceiveCount":"7"}`}
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-1"), Attributes: attrs})
	require.NoError(t, err)
	require.Equal(t, queueURL(env, "orders-1"), *out.QueueUrl)
	// The same again is no error; other settings are QueueNameExists.
	_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-1"), Attributes: attrs})
	require.NoError(t, err)
	_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-1"), Attributes: map[string]string{"VisibilityTimeout": "46"}})
	var exists *types.QueueNameExists
	require.ErrorAs(t, err, &exists)
	requireCode(t, err, "QueueAlreadyExists")

	// REST sees the queue with the settings SQS gave it.
	r := env.Do(http.MethodGet, "/v1/queues/orders-1", nil)
	require.Equal(t, http.StatusOK, r.Status)
	m := r.Map(t)
	require.EqualValues(t, 45, m["visibility_timeout_seconds"])
	require.EqualValues(t, 2, m["delay_seconds"])
	require.EqualValues(t, 3600, m["retention_seconds"])
	require.EqualValues(t, 7, m["max_receives"])

	url, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("orders-1")})
	require.NoError(t, err)
	require.Equal(t, queueURL(env, "orders-1"), *url.QueueUrl)
	_, err = c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("nope")})
	var missing *types.QueueDoesNotExist
	require.ErrorAs(t, err, &missing)
	requireCode(t, err, "AWS.SimpleQueueService.NonExistentQueue")

	ga, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: []types.QueueAttributeName{"All"}})
	require.NoError(t, err)
	require.Equal(t, "45", ga.Attributes["VisibilityTimeout"])
	require.Equal(t, "arn:aws:sqs:us-east-1:000000000000:orders-1", ga.Attributes["QueueArn"])
	require.Equal(t, "0", ga.Attributes["ApproximateNumberOfMessages"])
	created, err := strconv.ParseInt(ga.Attributes["CreatedTimestamp"], 10, 64)
	require.NoError(t, err)
	require.InDelta(t, time.Now().Unix(), created, 60)
	require.NotContains(t, ga.Attributes, "FifoQueue")

	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: url.QueueUrl, Attributes: map[string]string{"VisibilityTimeout": "90"}})
	require.NoError(t, err)
	require.EqualValues(t, 90, env.Do(http.MethodGet, "/v1/queues/orders-1", nil).Map(t)["visibility_timeout_seconds"])
	// A dead-letter target that does not exist is refused, and changes nothing.
	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: url.QueueUrl,
		Attributes: map[string]string{"RedrivePolicy": `{"maxReceiveCount":3,"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq"}`}})
	var badValue *types.InvalidAttributeValue
	require.ErrorAs(t, err, &badValue)
	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: url.QueueUrl, Attributes: map[string]string{"Bogus": "1"}})
	var badName *types.InvalidAttributeName
	require.ErrorAs(t, err, &badName)
	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(queueURL(env, "nope")), Attributes: map[string]string{"VisibilityTimeout": "5"}})
	require.ErrorAs(t, err, &missing)
	require.NotContains(t, restQueues(t, env), "nope", "SetQueueAttributes created no queue")
	require.EqualValues(t, 7, env.Do(http.MethodGet, "/v1/queues/orders-1", nil).Map(t)["max_receives"])

	_, err = c.AddPermission(ctx, &awssqs.AddPermissionInput{QueueUrl: url.QueueUrl, Label: aws.String("l"),
		AWSAccountIds: []string{"111111111111"}, Actions: []string{"SendMessage"}})
	var unsupported *types.UnsupportedOperation
	require.ErrorAs(t, err, &unsupported)

	_, err = c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: url.QueueUrl})
	require.NoError(t, err)
	_, err = c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: url.QueueUrl})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, env.Do(http.MethodGet, "/v1/queues/orders-1", nil).Status)
	_, err = c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: url.QueueUrl})
	require.ErrorAs(t, err, &missing)
}

// TestListQueues pages as SQS does: a prefix, MaxResults and NextToken,
// and only the queues the key may read.
func TestListQueues(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	for _, n := range []string{"orders-a", "orders-b", "orders-c", "other", "payments"} {
		_, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(n)})
		require.NoError(t, err)
	}
	all, err := c.ListQueues(ctx, &awssqs.ListQueuesInput{})
	require.NoError(t, err)
	require.Len(t, all.QueueUrls, 5)
	require.Nil(t, all.NextToken)

	var got []string
	in := &awssqs.ListQueuesInput{QueueNamePrefix: aws.String("o"), MaxResults: aws.Int32(2)}
	for {
		page, err := c.ListQueues(ctx, in)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.QueueUrls), 2)
		got = append(got, page.QueueUrls...)
		if page.NextToken == nil {
			break
		}
		in.NextToken = page.NextToken
	}
	require.Equal(t, []string{queueURL(env, "orders-a"), queueURL(env, "orders-b"), queueURL(env, "orders-c"), queueURL(env, "other")}, got)

	scoped, err := client(env, scopedID, scopedSecret).ListQueues(ctx, &awssqs.ListQueuesInput{})
	require.NoError(t, err)
	require.Equal(t, []string{queueURL(env, "orders-a"), queueURL(env, "orders-b"), queueURL(env, "orders-c")}, scoped.QueueUrls)
}

// TestPermissions: a scoped key may do over SQS what it may do over REST,
// and is refused the rest with AccessDenied before any name is looked up.
func TestPermissions(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := client(env, scopedID, scopedSecret), context.Background()
	_, err := admin(env).CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-x")})
	require.NoError(t, err)
	url := aws.String(queueURL(env, "orders-x"))

	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("hi")})
	require.NoError(t, err)
	_, err = c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url})
	require.NoError(t, err)
	for name, call := range map[string]func() error{
		"receive": func() error {
			_, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url})
			return err
		},
		"purge": func() error { _, err := c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: url}); return err },
		"create": func() error {
			_, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-y")})
			return err
		},
		"send elsewhere": func() error {
			_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(queueURL(env, "secret-queue")), MessageBody: aws.String("x")})
			return err
		},
	} {
		requireCode(t, call(), "AccessDenied")
		_ = name
	}
	require.EqualValues(t, 1, restHeld(t, env, "orders-x"))
	require.NotContains(t, restQueues(t, env), "orders-y")
}

// TestCreateQueueRace: concurrent CreateQueues of one name create it once
// (the store's create-if-absent): each call whose attributes are those
// the queue got answers its URL, each other one QueueAlreadyExists, and
// none changes the queue. CreateQueues racing DeleteQueues of another name
// with the same attributes each answer its URL (never QueueAlreadyExists
// nor an error of the server), and the deletes success or
// NonExistentQueue.
func TestCreateQueueRace(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()

	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-race"),
				Attributes: map[string]string{"VisibilityTimeout": strconv.Itoa(30 + i%2)}})
		}()
	}
	wg.Wait()
	ga, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL(env, "orders-race")),
		AttributeNames: []types.QueueAttributeName{"VisibilityTimeout"}})
	require.NoError(t, err)
	won := ga.Attributes["VisibilityTimeout"]
	for i, err := range errs {
		if strconv.Itoa(30+i%2) == won {
			require.NoError(t, err, "call %d asked what the queue has", i)
		} else {
			requireCode(t, err, "QueueAlreadyExists")
		}
	}

	attrs := map[string]string{"DelaySeconds": "1"}
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-churn"), Attributes: attrs})
			if assert.NoError(t, err, "create %d", i) {
				assert.Equal(t, queueURL(env, "orders-churn"), *out.QueueUrl)
			}
		}()
		go func() {
			defer wg.Done()
			_, err := c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(queueURL(env, "orders-churn"))})
			var missing *types.QueueDoesNotExist
			if err != nil {
				assert.ErrorAs(t, err, &missing, "delete %d", i)
			}
		}()
	}
	wg.Wait()
}
