package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
)

// Scenario 14, wake part (issue 20, must-have 4: a ReceiveMessage that
// waits is answered within 50 ms of a send at p99): a consumer long-polls
// an empty queue through the SQS face (ReceiveMessage, WaitTimeSeconds
// 20, aws-sdk-go-v2) and deletes what came; a producer sends one message
// through one of three faces; the latency is send start → receive
// returned (scenario 4's wakeLoop). Each sender kind runs idle and under
// paced background load on another queue, which a REST long poll drains.

// sqsSender is how the wake part's producer sends.
type sqsSender int

const (
	sendSQS  sqsSender = iota // SQS SendMessage
	sendREST                  // REST POST .../messages
	sendSQL                   // ferry.send in a transaction of its own
)

func (s sqsSender) String() string {
	return [...]string{"SQS SendMessage", "REST send", "SQL ferry.send"}[s]
}

// sqsSenders is the order of a condition's runs: each kind's two halves
// straddle the others', so a drift of the shared machine's load falls on
// all alike.
func sqsSenders() []sqsSender {
	return []sqsSender{sendSQS, sendREST, sendSQL, sendSQL, sendREST, sendSQS}
}

// sqsWakeLoadRate is the background load's messages per second, sent in
// batches of sqsWakeLoadBatch on a shared schedule.
const (
	sqsWakeLoadRate  = 1000
	sqsWakeLoadBatch = 10
)

// sqsWake is what the wake part measured: per condition (0 idle, 1
// loaded) and sender kind, send start → receive returned.
type sqsWake struct {
	wake   [2][3]Summary
	loaded float64 // background messages/s achieved while loaded
}

// sqsFaceWake runs the wake part: iters wakes per sender kind and
// condition.
func (b *Bench) sqsFaceWake(ctx context.Context, c *awssqs.Client, iters int) (sqsWake, error) {
	const wakeQueue, loadQueue = "bench-face-wake", "bench-face-load"
	var out sqsWake
	for _, q := range []string{wakeQueue, loadQueue} {
		if _, err := b.createQueue(ctx, q); err != nil {
			return out, err
		}
	}
	url, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(wakeQueue)})
	if err != nil {
		return out, fmt.Errorf("the SQS face: %w", err)
	}
	for cond, loaded := range []bool{false, true} {
		bg := b.startSQSWakeBackground(ctx, loadQueue, loaded)
		var samples [3]wakeSamples
		for _, s := range sqsSenders() {
			got, err := wakeLoop(ctx, max(iters/2, 1), b.sqsWakeConsumer(c, url.QueueUrl), b.sqsWakeProducer(c, url.QueueUrl, wakeQueue, s))
			if err != nil {
				_, _ = bg.stop()
				return out, fmt.Errorf("%s (loaded %v): %w", s, loaded, err)
			}
			samples[s].add(got)
		}
		rate, err := bg.stop()
		if err != nil {
			return out, fmt.Errorf("background load: %w", err)
		}
		if loaded {
			out.loaded = rate
		}
		for s := range samples {
			out.wake[cond][s] = Summarize(samples[s].wake)
			progress("  SQS wake, %s, %s: p50 %s p99 %s", sqsWakeCondition(loaded), sqsSender(s),
				fmtMs(out.wake[cond][s].P50), fmtMs(out.wake[cond][s].P99))
		}
	}
	return out, nil
}

// sqsWakeConsumer long-polls the queue through the SQS face for one
// message and deletes it as its ack.
func (b *Bench) sqsWakeConsumer(c *awssqs.Client, url *string) func(ctx context.Context) (func() error, error) {
	return func(ctx context.Context) (func() error, error) {
		got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 1, WaitTimeSeconds: 20})
		if err != nil {
			return nil, err
		}
		if len(got.Messages) != 1 {
			return nil, fmt.Errorf("long poll returned %d messages, want 1", len(got.Messages))
		}
		return func() error {
			_, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: got.Messages[0].ReceiptHandle})
			return err
		}, nil
	}
}

// sqsWakeProducer sends one message to the wake queue through s.
func (b *Bench) sqsWakeProducer(c *awssqs.Client, url *string, queue string, s sqsSender) func(ctx context.Context) error {
	one := SendRequest(1)
	return func(ctx context.Context) error {
		switch s {
		case sendSQS:
			_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String(body)})
			return err
		case sendREST:
			return b.client.Send(ctx, queue, one)
		default:
			batch := &pgx.Batch{}
			batch.Queue(`BEGIN`)
			batch.Queue(`SELECT * FROM ferry.send($1, $2::jsonb)`, queue, body)
			batch.Queue(`COMMIT`)
			return b.raw.SendBatch(ctx, batch).Close()
		}
	}
}

func sqsWakeCondition(loaded bool) string {
	if loaded {
		return fmt.Sprintf("under ~%s msgs/s", fmtInt(sqsWakeLoadRate))
	}
	return "idle"
}

// sqsWakeBackground is the load beside the wakes: a REST consumer that
// long-polls the load queue (parked when idle) and acks, and, when
// loaded, a producer sending to it at sqsWakeLoadRate.
type sqsWakeBackground struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
	sent   int
	start  time.Time
}

func (g *sqsWakeBackground) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = err
	}
}

// stop ends the background load and reports the rate it sent at and its
// first error.
func (g *sqsWakeBackground) stop() (float64, error) {
	g.cancel()
	g.wg.Wait()
	return float64(g.sent) / time.Since(g.start).Seconds(), g.err
}

func (b *Bench) startSQSWakeBackground(ctx context.Context, queue string, loaded bool) *sqsWakeBackground {
	ctx, cancel := context.WithCancel(ctx)
	g := &sqsWakeBackground{cancel: cancel, start: time.Now()}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for ctx.Err() == nil {
			receipts, err := b.client.Receive(ctx, queue, 100, 20)
			if err == nil && len(receipts) > 0 {
				err = b.client.Ack(ctx, queue, receipts)
			}
			if err != nil {
				if ctx.Err() == nil {
					g.fail(err)
				}
				return
			}
		}
	}()
	if !loaded {
		return g
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		req := SendRequest(sqsWakeLoadBatch)
		every := time.Second * sqsWakeLoadBatch / sqsWakeLoadRate
		for next := time.Now(); ctx.Err() == nil; next = next.Add(every) {
			sleepUntil(ctx, next)
			if ctx.Err() != nil {
				return
			}
			if err := b.client.Send(ctx, queue, req); err != nil {
				if ctx.Err() == nil {
					g.fail(err)
				}
				return
			}
			g.sent += sqsWakeLoadBatch
		}
	}()
	return g
}
