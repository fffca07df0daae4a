package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/ferry-mq/ferry/client"
)

// The worker loop: receive from "orders" with four handlers at once, ack on
// success, retry on error, dead-letter what can never succeed, and drain on
// Ctrl-C. (Compiled by go test, not run: it needs a Ferry at FERRY_URL.)
func ExampleClient_Work() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c := client.New(os.Getenv("FERRY_URL"), os.Getenv("FERRY_KEY"))
	err := c.Work(ctx, "orders", func(ctx context.Context, m *client.Message) error {
		var order struct{ ID string }
		if err := json.Unmarshal(m.Body, &order); err != nil {
			return client.Permanent(err) // retrying cannot help
		}
		log.Printf("order %s", order.ID)
		return nil // ack
	}, client.WorkOptions{Concurrency: 4})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// Problems come back as *client.Error; branch on Code.
func ExampleError() {
	err := fmt.Errorf("send: %w", &client.Error{Status: 429, Code: "queue_full", Detail: "queue orders is full"})
	var e *client.Error
	if errors.As(err, &e) && e.Code == "queue_full" {
		fmt.Println(e.Status, e.Temporary())
	}
	fmt.Println(client.IsCode(err, "not_found"))
	// Output:
	// 429 true
	// false
}

// A handler's error wrapped by Permanent dead-letters the message at once.
func ExamplePermanent() {
	err := client.Permanent(errors.New("malformed order"))
	fmt.Println(client.IsPermanent(err), client.IsPermanent(errors.New("timeout")), err)
	// Output: true false malformed order
}
