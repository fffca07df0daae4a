package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Scenario 14: the SQS face against the REST face, on the same server and
// database. Both sides run the same cycle on a queue of their own — send
// a batch of 10, receive up to 10, delete (ack) what was received — the
// SQS side through aws-sdk-go-v2 (the AWS JSON 1.0 protocol, SigV4-signed
// by the SDK, its checksums checked by the SDK), the REST side through the
// bench's REST client. The REST face takes the slot the other scenarios
// give raw SQL (rawSide: left column, first in the alternation, "raw" in
// progress lines and CPU profile labels).

// sqsBatch is the batch of every request of the cycle (SQS's maximum).
const sqsBatch = 10

// sqsClients is the concurrency of each side.
const sqsClients = 8

// newSQSClient is aws-sdk-go-v2's SQS client for the bench's server,
// signing as the access key id admin (FERRY_ADMIN_KEY) with the bench's
// connection pool settings; it does not retry, so that an error ends the
// run as the REST client's do.
func (b *Bench) newSQSClient() *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(b.ferry.URL()),
		HTTPClient:   newHTTPClient(),
		Retryer:      aws.NopRetryer{},
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "admin", SecretAccessKey: adminKey}, nil
		}),
	})
}

// sqsCycle is one cycle through the SQS face: SendMessageBatch of 10,
// ReceiveMessage of up to 10, DeleteMessageBatch of what came. It returns
// the messages deleted.
func sqsCycle(ctx context.Context, c *awssqs.Client, queueURL *string, entries []types.SendMessageBatchRequestEntry) (int, error) {
	sent, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: queueURL, Entries: entries})
	if err != nil {
		return 0, err
	}
	if len(sent.Failed) > 0 {
		return 0, fmt.Errorf("SendMessageBatch: %d entries failed, the first %s", len(sent.Failed), aws.ToString(sent.Failed[0].Code))
	}
	got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: queueURL, MaxNumberOfMessages: sqsBatch})
	if err != nil || len(got.Messages) == 0 {
		return 0, err
	}
	del := make([]types.DeleteMessageBatchRequestEntry, len(got.Messages))
	for i, m := range got.Messages {
		del[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
	}
	deleted, err := c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: queueURL, Entries: del})
	if err != nil {
		return 0, err
	}
	if len(deleted.Failed) > 0 {
		return 0, fmt.Errorf("DeleteMessageBatch: %d entries failed, the first %s", len(deleted.Failed), aws.ToString(deleted.Failed[0].Code))
	}
	return len(deleted.Successful), nil
}

// restCycle is the same cycle through the REST face: a send of 10, a
// receive of up to 10, an ack of their receipts.
func (c *FerryClient) restCycle(ctx context.Context, queue string, send []byte) (int, error) {
	if err := c.Send(ctx, queue, send); err != nil {
		return 0, err
	}
	receipts, err := c.Receive(ctx, queue, sqsBatch, 0)
	if err != nil || len(receipts) == 0 {
		return 0, err
	}
	return len(receipts), c.Ack(ctx, queue, receipts)
}

// sqsFace is scenario 14.
func (b *Bench) sqsFace(ctx context.Context) (*Section, error) {
	const restQueue, sqsQueue = "bench-face-rest", "bench-face-sqs"
	for _, q := range []string{restQueue, sqsQueue} {
		if _, err := b.createQueue(ctx, q); err != nil {
			return nil, err
		}
	}
	c := b.newSQSClient()
	url, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(sqsQueue)})
	if err != nil {
		return nil, fmt.Errorf("the SQS face: %w", err)
	}
	entries := make([]types.SendMessageBatchRequestEntry, sqsBatch)
	for i := range entries {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body)}
	}
	send := SendRequest(sqsBatch)
	rest, sqs, pairs, err := b.compare(ctx, sideLoads{label: "sqs-face", clients: sqsClients,
		prepare: func(side) error { return b.reset(ctx) },
		ops: [2]loadOp{
			func(ctx context.Context, _ int) (int, error) { return b.client.restCycle(ctx, restQueue, send) },
			func(ctx context.Context, _ int) (int, error) { return sqsCycle(ctx, c, url.QueueUrl, entries) },
		}})
	if err != nil {
		return nil, err
	}
	iters := 2 * max(b.opts.WakeIters/2, 1)
	progress("  SQS face: long-poll wakes, %d per sender kind, idle and loaded", iters)
	wake, err := b.sqsFaceWake(ctx, c, iters)
	if err != nil {
		return nil, fmt.Errorf("SQS long-poll wakes: %w", err)
	}
	return sqsFaceSection(rest, sqs, pairs, wake, sqsFaceHow(sqsClients, b.opts.Duration, iters, b.roundsNote)), nil
}
