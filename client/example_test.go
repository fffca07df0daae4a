package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sort"
	"sync"

	"github.com/ferry-mq/ferry/client"
)

// The worker loop: three messages handled by two handlers at once, each
// acked when its handler returns nil.
func ExampleClient_Work() {
	url, key, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	c := client.New(url, key)
	if _, _, err := c.PutQueue(ctx, "orders", client.QueueConfig{}); err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"A-1", "A-2", "A-3"} {
		if _, err := c.Send(ctx, "orders", client.SendMessage{Body: map[string]string{"id": id}}); err != nil {
			log.Fatal(err)
		}
	}

	var mu sync.Mutex
	var shipped []string
	err := c.Work(ctx, "orders", func(ctx context.Context, m *client.Message) error {
		var order struct{ ID string }
		if err := json.Unmarshal(m.Body, &order); err != nil {
			return client.Permanent(err) // dead-letter: retrying cannot help
		}
		mu.Lock()
		defer mu.Unlock()
		shipped = append(shipped, order.ID)
		if len(shipped) == 3 {
			cancel() // this example stops here; a worker runs until shut down
		}
		return nil // ack
	}, client.WorkOptions{Concurrency: 2, WaitSeconds: 1})
	fmt.Println(errors.Is(err, context.Canceled))

	sort.Strings(shipped)
	fmt.Println(shipped)
	q, _ := c.GetQueue(context.Background(), "orders")
	fmt.Println("left:", q.Stats.Available+q.Stats.InFlight)
	// Output:
	// true
	// [A-1 A-2 A-3]
	// left: 0
}

// A worker that drains on Ctrl-C. (Compiled by go test, not run: it needs
// a Ferry at FERRY_URL.)
func ExampleClient_Work_shutdown() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c := client.New(os.Getenv("FERRY_URL"), os.Getenv("FERRY_KEY"))
	err := c.Work(ctx, "orders", func(ctx context.Context, m *client.Message) error {
		log.Printf("order %s", m.Body)
		return nil
	}, client.WorkOptions{Concurrency: 4})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// The consumer-group loop: events of one key come in offset order, and
// what the handler finished is committed.
func ExampleClient_Consume() {
	url, key, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	c := client.New(url, key)
	if _, _, err := c.PutTopic(ctx, "orders", client.TopicConfig{Partitions: client.Ptr(4)}); err != nil {
		log.Fatal(err)
	}
	_, err := c.Publish(ctx, "orders",
		client.PublishEvent{Type: "order.created", Key: "A-1"},
		client.PublishEvent{Type: "order.paid", Key: "A-1"},
		client.PublishEvent{Type: "order.shipped", Key: "A-1"})
	if err != nil {
		log.Fatal(err)
	}

	seen := 0
	err = c.Consume(ctx, "orders", "billing", func(ctx context.Context, e *client.Event) error {
		fmt.Println(e.Offset, e.Type)
		if seen++; seen == 3 {
			cancel()
		}
		return nil
	}, client.ConsumeOptions{Consumer: "billing-1", Start: "earliest", WaitSeconds: 1})
	fmt.Println(errors.Is(err, context.Canceled))

	g, _ := c.GetGroup(context.Background(), "orders", "billing")
	lag := int64(0)
	for _, p := range g.Partitions {
		lag += p.Lag
	}
	fmt.Println("lag:", lag, "members:", len(g.Members))
	// Output:
	// 0 order.created
	// 1 order.paid
	// 2 order.shipped
	// true
	// lag: 0 members: 0
}

// Problems come back as *client.Error; branch on Code.
func ExampleError() {
	url, key, stop := exampleServer()
	defer stop()
	c := client.New(url, key)

	_, err := c.GetQueue(context.Background(), "nowhere")
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Code, e.Temporary())
	}
	fmt.Println(client.IsCode(err, "not_found"))
	// Output:
	// 404 not_found false
	// true
}

// A handler's error wrapped by Permanent dead-letters the message at once.
func ExamplePermanent() {
	err := client.Permanent(errors.New("malformed order"))
	fmt.Println(client.IsPermanent(err), client.IsPermanent(errors.New("timeout")), err)
	// Output: true false malformed order
}

// Publishing CloudEvents: one in structured mode, the id its dedup key and
// the partitionkey its partition; read back with every attribute.
func ExampleClient_PublishCloudEvent() {
	url, key, stop := exampleServer()
	defer stop()
	ctx := context.Background()
	c := client.New(url, key)
	if _, _, err := c.PutTopic(ctx, "orders", client.TopicConfig{Partitions: client.Ptr(1)}); err != nil {
		log.Fatal(err)
	}

	e := client.CloudEvent{
		ID: "evt-1", Source: "https://shop.invalid/orders", Type: "order.created", Subject: "orders/1",
		PartitionKey: "A-1", Data: map[string]string{"order_id": "A-1"},
	}
	first, err := c.PublishCloudEvent(ctx, "orders", e)
	if err != nil {
		log.Fatal(err)
	}
	again, _ := c.PublishCloudEvent(ctx, "orders", e)
	fmt.Println(first.Offset, again.Duplicate)

	page, _ := c.ReadEvents(ctx, "orders", client.ReadEvents{Partition: 0})
	got := page.Events[0].CloudEvent()
	fmt.Println(got.ID, got.Source, got.Subject, got.PartitionKey, string(page.Events[0].Data))
	// Output:
	// 0 true
	// evt-1 https://shop.invalid/orders orders/1 A-1 {"order_id":"A-1"}
}
