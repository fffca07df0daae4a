// Command worker-go is a Ferry worker in Go, on the project's client
// (package github.com/ferry-mq/ferry/client): the Go twin of
// examples/worker.py. It works the queue "orders" with four handlers at
// once: each order is "shipped" (printed) and acked; a body that is not an
// order is dead-lettered at once; an error would nack it, to be retried
// with the queue's backoff. Ctrl-C (or SIGTERM) drains: running handlers
// finish and ack before it exits.
//
//	FERRY_URL=http://127.0.0.1:8080 FERRY_KEY=... go run ./examples/worker-go
//	go run ./examples/worker-go -idle 2s   # exit once no message came for 2 s
//
// The README shows its loop (its test checks that the README's go block is
// a passage of this file, and runs it against a real Ferry).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ferry-mq/ferry/client"
)

// Order is the body of a message of the queue "orders".
type Order struct {
	OrderID string `json:"order_id"`
}

// out is where shipped orders are written (the test reads it).
var out io.Writer = os.Stdout

func main() {
	idle := flag.Duration("idle", 0, "exit once no message came for this long (0: run until Ctrl-C)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *idle); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "worker-go:", err)
		os.Exit(1)
	}
}

// ship is the work an order needs; an error would have it retried.
func ship(_ context.Context, order Order) error {
	if order.OrderID == "" {
		return client.Permanent(errors.New("an order without order_id"))
	}
	_, err := fmt.Fprintln(out, "shipped", order.OrderID)
	return err
}

// errIdle ends the loop when the queue stayed empty for the -idle time.
var errIdle = errors.New("the queue stayed empty")

// run works the queue "orders" until ctx ends, or until the queue stayed
// empty for idle (when idle > 0).
func run(ctx context.Context, idle time.Duration) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := prepare(ctx, idle, cancel); err != nil {
		return err
	}
	c := client.New(os.Getenv("FERRY_URL"), os.Getenv("FERRY_KEY"))
	err := c.Work(ctx, "orders", func(ctx context.Context, m *client.Message) error {
		var order Order
		if err := json.Unmarshal(m.Body, &order); err != nil {
			return client.Permanent(err) // dead-letter it: retrying cannot help
		}
		return ship(ctx, order) // nil acks; an error nacks (retried with backoff)
	}, client.WorkOptions{Concurrency: 4})
	if errors.Is(context.Cause(ctx), errIdle) {
		return nil
	}
	return err
}

// prepare makes the queue if it is missing (an existing one keeps its
// settings) and, when idle > 0, watches it for stopWhenEmpty.
func prepare(ctx context.Context, idle time.Duration, cancel context.CancelCauseFunc) error {
	c := client.New(os.Getenv("FERRY_URL"), os.Getenv("FERRY_KEY"))
	if _, _, err := c.PutQueue(ctx, "orders", client.QueueConfig{}); err != nil {
		return err
	}
	if idle > 0 {
		go stopWhenEmpty(ctx, c, idle, cancel)
	}
	return nil
}

// stopWhenEmpty cancels with errIdle once the queue has had nothing
// available, in flight or delayed for idle, checking every 200 ms.
func stopWhenEmpty(ctx context.Context, c *client.Client, idle time.Duration, cancel context.CancelCauseFunc) {
	emptySince := time.Now()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		q, err := c.GetQueue(ctx, "orders")
		if err != nil || q.Stats.Available+q.Stats.InFlight+q.Stats.Delayed > 0 {
			emptySince = time.Now()
			continue
		}
		if time.Since(emptySince) >= idle {
			cancel(errIdle)
			return
		}
	}
}
