// Command sqs-go uses Ferry from aws-sdk-go-v2's SQS client: it makes a
// FIFO queue, sends a message to it, receives and deletes it. The README
// shows its client and calls (examples/sqs-go's test checks that they are
// this file's, and runs it against a real Ferry).
//
// Usage, with `make dev` running and a key made with POST /v1/keys:
//
//	FERRY_URL=http://127.0.0.1:8080 AWS_ACCESS_KEY_ID=key_… AWS_SECRET_ACCESS_KEY=ferry_sk_… go run ./examples/sqs-go
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sqs-go:", err)
		os.Exit(1)
	}
}

// run makes the queue invoices.fifo, sends one message and receives it.
func run(ctx context.Context, out io.Writer) error {
	client := sqs.New(sqs.Options{
		Region:       "us-east-1", // any region name works
		BaseEndpoint: aws.String(os.Getenv("FERRY_URL")),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: os.Getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY")}, nil
		}),
	})
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String("invoices.fifo"), Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}})
	if err != nil {
		return err
	}
	_, err = client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: q.QueueUrl, MessageBody: aws.String("invoice 7"), MessageGroupId: aws.String("customer-42")})
	if err != nil {
		return err
	}
	got, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 20})
	if err != nil {
		return err
	}
	for _, m := range got.Messages {
		fmt.Fprintln(out, *m.Body)
		_, err = client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle})
		if err != nil {
			return err
		}
	}
	if len(got.Messages) == 0 {
		return errors.New("no message within 20 s")
	}
	return nil
}
