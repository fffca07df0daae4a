package sqs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/sqsmd5"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// createQueue makes a queue over SQS and returns its URL.
func createQueue(t *testing.T, c *awssqs.Client, name string, attrs map[string]string) *string {
	t.Helper()
	out, err := c.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	require.NoError(t, err)
	return out.QueueUrl
}

// everyType is a message attribute of every data type.
func everyType() map[string]types.MessageAttributeValue {
	return map[string]types.MessageAttributeValue{
		"s":         {DataType: aws.String("String"), StringValue: aws.String("plain ✓ text")},
		"n":         {DataType: aws.String("Number"), StringValue: aws.String("-12.50e3")},
		"b":         {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 0xff, 'x'}},
		"label.png": {DataType: aws.String("Binary.png"), BinaryValue: []byte("\x89PNG")},
		"n.f":       {DataType: aws.String("Number.float"), StringValue: aws.String("3.14")},
		"s-custom":  {DataType: aws.String("String.json"), StringValue: aws.String(`{"a":1}`)},
	}
}

// TestMessageRoundTrip: a body and attributes of every data type come
// back exactly, with the checksums SQS computes (the SDK checks the
// body's itself), and receive, delete and visibility act on the message.
func TestMessageRoundTrip(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	url := createQueue(t, c, "rt", nil)
	body := "ünïcödé \u2603 \U0001F600\ttab\r\nline <xml>&amp;</xml> \"quoted\""
	sent, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String(body), MessageAttributes: everyType(),
		MessageSystemAttributes: map[string]types.MessageSystemAttributeValue{
			"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-5759e988-bd862e3fe1be46a994272793")},
		}})
	require.NoError(t, err)
	require.Equal(t, md5Attrs(everyType()), *sent.MD5OfMessageAttributes)
	require.NotEmpty(t, *sent.MD5OfMessageSystemAttributes)

	got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}, VisibilityTimeout: 60})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	m := got.Messages[0]
	require.Equal(t, body, *m.Body)
	require.Equal(t, *sent.MessageId, *m.MessageId)
	require.Equal(t, everyType(), m.MessageAttributes)
	require.Equal(t, *sent.MD5OfMessageAttributes, *m.MD5OfMessageAttributes)
	require.Equal(t, "1", m.Attributes["ApproximateReceiveCount"])
	require.Equal(t, "Root=1-5759e988-bd862e3fe1be46a994272793", m.Attributes["AWSTraceHeader"])
	sentAt, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64)
	require.NoError(t, err)
	require.InDelta(t, time.Now().UnixMilli(), sentAt, 60_000)

	// A prefix selects attributes, and the checksum covers those answered.
	_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: url, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
	require.NoError(t, err)
	again, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, MessageAttributeNames: []string{"n.*", "s"}})
	require.NoError(t, err)
	require.Len(t, again.Messages, 1, "visibility 0 made the message visible at once")
	want := map[string]types.MessageAttributeValue{"n.f": everyType()["n.f"], "s": everyType()["s"]}
	require.Equal(t, want, again.Messages[0].MessageAttributes)
	require.Equal(t, md5Attrs(want), *again.Messages[0].MD5OfMessageAttributes)

	// The first receipt is stale now.
	_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: url, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 30})
	var notInflight *types.MessageNotInflight
	require.ErrorAs(t, err, &notInflight)
	_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: aws.String("not-a-receipt")})
	var invalidReceipt *types.ReceiptHandleIsInvalid
	require.ErrorAs(t, err, &invalidReceipt)
	_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: again.Messages[0].ReceiptHandle})
	require.NoError(t, err)
	require.EqualValues(t, 0, restHeld(t, env, "rt"))
}

// md5Attrs is MD5OfMessageAttributes of the SDK's attributes, by the
// published algorithm.
func md5Attrs(attrs map[string]types.MessageAttributeValue) string {
	m := map[string]sqsmd5.Attribute{}
	for n, a := range attrs {
		m[n] = sqsmd5.Attribute{DataType: *a.DataType, StringValue: aws.ToString(a.StringValue), BinaryValue: a.BinaryValue}
	}
	return sqsmd5.Attributes(m)
}

// TestFIFO: groups are delivered in send order, one message of a group at
// a time; dedup by MessageDeduplicationId or by content; SQS's FIFO rules.
func TestFIFO(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	_, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("jobs.fifo")})
	var badValue *types.InvalidAttributeValue
	require.ErrorAs(t, err, &badValue, "a .fifo queue needs FifoQueue=true")
	url := createQueue(t, c, "jobs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})

	var ids []string
	for i := range 5 {
		out, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("m" + strconv.Itoa(i)), MessageGroupId: aws.String("g1")})
		require.NoError(t, err)
		require.NotEmpty(t, *out.SequenceNumber)
		ids = append(ids, *out.MessageId)
	}
	dup, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("m0"), MessageGroupId: aws.String("g1")})
	require.NoError(t, err)
	require.Equal(t, ids[0], *dup.MessageId, "the same body within the window is the same message")
	explicit, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("m0"), MessageGroupId: aws.String("g1"), MessageDeduplicationId: aws.String("other")})
	require.NoError(t, err)
	ids = append(ids, *explicit.MessageId)

	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("x")})
	requireCode(t, err, "MissingParameter")
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("x"), MessageGroupId: aws.String("g"), DelaySeconds: 5})
	requireCode(t, err, "InvalidParameterValue")

	var order []string
	for range ids {
		got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 10, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1, "a group delivers one message at a time")
		m := got.Messages[0]
		require.Equal(t, "g1", m.Attributes["MessageGroupId"])
		require.NotEmpty(t, m.Attributes["MessageDeduplicationId"])
		require.NotEmpty(t, m.Attributes["SequenceNumber"])
		order = append(order, *m.MessageId)
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: m.ReceiptHandle})
		require.NoError(t, err)
	}
	require.Equal(t, ids, order)

	std := createQueue(t, c, "std", nil)
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: std, MessageBody: aws.String("x"), MessageGroupId: aws.String("g")})
	requireCode(t, err, "InvalidParameterValue")
}

// TestOneBroker: a message sent over SQS is received over REST and the
// reverse, with receipts usable on either face.
func TestOneBroker(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	url := createQueue(t, c, "both", nil)
	_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String(`{"not": "parsed"}`),
		MessageAttributes: map[string]types.MessageAttributeValue{"kind": {DataType: aws.String("String"), StringValue: aws.String("order")}}})
	require.NoError(t, err)
	r := env.Do(http.MethodPost, "/v1/queues/both/receive", map[string]any{})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var rest struct {
		Messages []struct {
			Body       json.RawMessage
			Attributes map[string]string
			Receipt    string
		}
	}
	r.JSON(t, &rest)
	require.Len(t, rest.Messages, 1)
	require.JSONEq(t, `"{\"not\": \"parsed\"}"`, string(rest.Messages[0].Body), "an SQS body is a JSON string to REST")
	require.Equal(t, map[string]string{"kind": "order"}, rest.Messages[0].Attributes)
	// A REST receipt deletes over SQS.
	_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: aws.String(rest.Messages[0].Receipt)})
	require.NoError(t, err)
	require.EqualValues(t, 0, restHeld(t, env, "both"))

	r = env.Do(http.MethodPost, "/v1/queues/both/messages", map[string]any{"messages": []any{
		map[string]any{"body": map[string]any{"order_id": "ORD-1", "n": []any{1, 2.5}}, "attributes": map[string]string{"type": "order.created"}},
	}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, MessageAttributeNames: []string{"All"}})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	require.JSONEq(t, `{"order_id":"ORD-1","n":[1,2.5]}`, *got.Messages[0].Body)
	require.NotContains(t, *got.Messages[0].Body, " ", "compact JSON text")
	require.Equal(t, "order.created", *got.Messages[0].MessageAttributes["type"].StringValue)
	// An SQS receipt acks over REST.
	r = env.Do(http.MethodPost, "/v1/queues/both/ack", map[string]any{"receipts": []string{*got.Messages[0].ReceiptHandle}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"ok"`)
}

// TestStoredFormBounded: an SQS body is stored as a JSON string, larger
// than SQS's measure of it, and that stored form is bounded too. A body of
// the full 256 KiB made of the control characters SQS allows (tab, LF,
// CR: each stored as a 2-byte escape) is taken and received byte for byte
// (the SDK checks its MD5); a message within SQS's measure whose stored
// form passes twice the server's limit and 64 KiB (a body of escapes with
// attributes of '<', which the stored JSON writes in 6 bytes each) is
// InvalidParameterValue on SendMessage and on its batch entry, and
// nothing of it is written.
func TestStoredFormBounded(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	url := createQueue(t, c, "escapes", nil)
	body := strings.Repeat("\t\n\r", 262144/3) + "\t"
	require.Len(t, body, 262144)
	_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String(body)})
	require.NoError(t, err)
	got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, VisibilityTimeout: 60})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	require.Equal(t, body, *got.Messages[0].Body)
	_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: got.Messages[0].ReceiptHandle})
	require.NoError(t, err)

	attrs := map[string]types.MessageAttributeValue{}
	for i := range 10 {
		attrs["a"+strconv.Itoa(i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(strings.Repeat("<", 4096))}
	}
	big := strings.Repeat("\n", 200000) // SQS's measure: 200000 + 10 × (2 + 6 + 4096) bytes, within 256 KiB
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String(big), MessageAttributes: attrs})
	requireCode(t, err, "InvalidParameterValue")
	require.ErrorContains(t, err, "too large as Ferry stores it")
	batch, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: url, Entries: []types.SendMessageBatchRequestEntry{
		{Id: aws.String("small"), MessageBody: aws.String("fits")},
		{Id: aws.String("big"), MessageBody: aws.String(big), MessageAttributes: attrs},
	}})
	require.NoError(t, err)
	require.Len(t, batch.Successful, 1)
	require.Len(t, batch.Failed, 1)
	require.Equal(t, "big", *batch.Failed[0].Id)
	require.Equal(t, "InvalidParameterValue", *batch.Failed[0].Code)
	require.True(t, batch.Failed[0].SenderFault)
	require.EqualValues(t, 1, restHeld(t, env, "escapes"), "only the small entry was written")
}

// TestFIFOConcurrentConsumers: consumers receiving from one FIFO queue at
// once (aws-sdk-go-v2, batches of up to 10) never hold two messages of a
// group at a time, and get each group's messages in send order, while
// the groups are delivered in parallel.
func TestFIFOConcurrentConsumers(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	url := createQueue(t, c, "orders.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	const groups, perGroup, consumers = 4, 15, 6
	sent := map[string][]string{}
	for i := range perGroup {
		var entries []types.SendMessageBatchRequestEntry
		for g := range groups {
			group, body := "g"+strconv.Itoa(g), fmt.Sprintf("g%d-%02d", g, i)
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(g)), MessageBody: aws.String(body), MessageGroupId: aws.String(group)})
			sent[group] = append(sent[group], body)
		}
		out, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: url, Entries: entries})
		require.NoError(t, err)
		require.Empty(t, out.Failed)
	}
	var (
		mu       sync.Mutex
		inFlight = map[string]bool{}
		got      = map[string][]string{}
		total    int
		overlaps []string
	)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
					VisibilityTimeout: 60, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"MessageGroupId"}})
				if err != nil {
					continue
				}
				mu.Lock()
				for _, m := range out.Messages {
					g := m.Attributes["MessageGroupId"]
					if inFlight[g] {
						overlaps = append(overlaps, *m.Body)
					}
					inFlight[g] = true
					got[g] = append(got[g], *m.Body)
					total++
				}
				done := total == groups*perGroup
				mu.Unlock()
				for _, m := range out.Messages {
					// Released before the delete: the group's next message
					// cannot be received before the delete commits.
					mu.Lock()
					inFlight[m.Attributes["MessageGroupId"]] = false
					mu.Unlock()
					_, err := c.DeleteMessage(context.Background(), &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: m.ReceiptHandle})
					if err != nil {
						mu.Lock()
						overlaps = append(overlaps, "delete: "+err.Error())
						mu.Unlock()
					}
				}
				if done {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	require.Empty(t, overlaps, "two messages of a group in flight at once (or a delete failed)")
	require.Equal(t, sent, got, "each group in send order")
}

// countingTransport counts the requests of one SQS action it carries.
type countingTransport struct {
	action string
	n      atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("X-Amz-Target") == "AmazonSQS."+c.action {
		c.n.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestFullQueueRetriedBySDK: a send to a queue at its max_depth is
// RequestThrottled, which aws-sdk-go-v2's standard retryer counts as a
// throttle and retries: a SendMessage made while the queue is full
// succeeds, by itself, once a message leaves it. Nothing was written by
// the refused attempts.
func TestFullQueueRetriedBySDK(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	url := createQueue(t, c, "full", nil)
	require.Equal(t, http.StatusOK, env.Do(http.MethodPut, "/v1/queues/full", map[string]any{"max_depth": 1}).Status)
	_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("one")})
	require.NoError(t, err)
	_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("two")})
	requireCode(t, err, "RequestThrottled")
	require.Equal(t, aws.TrueTernary, retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err), "a throttle to the SDK")

	counted := &countingTransport{action: "SendMessage"}
	retrying := awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(env.URL), HTTPClient: &http.Client{Transport: counted},
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts, o.MaxBackoff, o.RateLimiter = 50, 100*time.Millisecond, ratelimit.None
		}),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "admin", SecretAccessKey: ferrytest.AdminKey}, nil
		}),
	})
	sent := make(chan error, 1)
	go func() {
		_, err := retrying.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("two")})
		sent <- err
	}()
	ferrytest.WaitFor(t, 10*time.Second, "the SDK to retry the throttled send", func() bool { return counted.n.Load() >= 2 })
	require.EqualValues(t, 1, restHeld(t, env, "full"))
	got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: got.Messages[0].ReceiptHandle})
	require.NoError(t, err)
	require.NoError(t, <-sent, "retried until the queue had room")
	got, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	require.Equal(t, "two", *got.Messages[0].Body)
}

// TestDeleteAfterVisibilityTimeout: as on SQS, DeleteMessage and
// DeleteMessageBatch delete a message with a receipt handle whose
// visibility timeout ran out, as long as nobody received the message
// since; once it was received again, the old handle deletes nothing (and
// is no error) while the new one deletes it.
func TestDeleteAfterVisibilityTimeout(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	url := createQueue(t, c, "late", nil)
	// expired sends body and receives it with a 1 s visibility timeout,
	// then waits until REST counts nothing in flight: the lease ran out.
	expired := func(body string) *string {
		t.Helper()
		_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String(body)})
		require.NoError(t, err)
		got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, VisibilityTimeout: 1})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		require.Equal(t, body, *got.Messages[0].Body)
		ferrytest.WaitFor(t, 10*time.Second, "the visibility timeout to run out", func() bool {
			return restInFlight(t, env, "late") == 0
		})
		require.EqualValues(t, 1, restHeld(t, env, "late"))
		return got.Messages[0].ReceiptHandle
	}

	_, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: expired("one")})
	require.NoError(t, err)
	require.EqualValues(t, 0, restHeld(t, env, "late"), "DeleteMessage after the visibility timeout")

	del, err := c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: url, Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("a"), ReceiptHandle: expired("two")}}})
	require.NoError(t, err)
	require.Len(t, del.Successful, 1)
	require.Empty(t, del.Failed)
	require.EqualValues(t, 0, restHeld(t, env, "late"), "DeleteMessageBatch after the visibility timeout")

	old := expired("three")
	again, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, VisibilityTimeout: 60})
	require.NoError(t, err)
	require.Len(t, again.Messages, 1, "received again")
	_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: old})
	require.NoError(t, err)
	require.EqualValues(t, 1, restInFlight(t, env, "late"), "the old handle deleted a message received again")
	_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: again.Messages[0].ReceiptHandle})
	require.NoError(t, err)
	require.EqualValues(t, 0, restHeld(t, env, "late"))
}
