package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
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
