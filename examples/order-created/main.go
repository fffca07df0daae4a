// Command order-created is the outbox lab: an orders service and four
// consumers of its events, run against Ferry with faults injected, ending
// with a table of what each consumer saw.
//
//   - orders inserts an order and publishes order.created in the same
//     transaction (SQL API: ferry.publish); some transactions roll back,
//     some commits are "retried" as if their answer was lost (the same
//     event id again: a duplicate), and each order is later shipped
//     (order.shipped, another transaction);
//   - payment is a SQL consumer: it records the charge under a unique
//     order_id and acks in the same transaction (ferry.receive, ferry.ack),
//     and is killed before its commit now and then: every order is charged
//     exactly once. One poison order fails until it is dead-lettered; the
//     payment code is then fixed and the order redriven;
//   - email is a push subscription: a webhook receiver that verifies the
//     Standard Webhooks signature and dedups on webhook-id, and fails some
//     first attempts;
//   - inventory is an ordered subscription keyed by order id, received and
//     acked over REST: every order's created comes before its shipped;
//   - analytics is a consumer group replaying the log from earliest, with a
//     member that leaves halfway.
//
// Run it next to a running Ferry, as a user would: `ferry dev` prints the
// base URL, the admin key and the database; export them and run the lab:
//
//	export FERRY_URL=http://127.0.0.1:8080 FERRY_KEY=... DATABASE_URL=postgres://...
//	go run ./examples/order-created
//
// The Ferry it runs against must allow push to loopback URLs
// (FERRY_ALLOW_PRIVATE_PUSH, on in `ferry dev`). It exits 1 if a consumer
// saw something it should not have. It imports nothing of Ferry's but
// its Go client: it speaks REST through package client and the SQL API
// over a database connection.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"
)

func main() {
	orders := flag.Int("orders", 40, "orders to place")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := Config{
		URL: os.Getenv("FERRY_URL"), Key: os.Getenv("FERRY_KEY"), DatabaseURL: os.Getenv("DATABASE_URL"),
		Orders: *orders, Faults: true,
	}
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "order-created:", err)
		os.Exit(1)
	}
}

// run checks that cfg names a Ferry, runs the lab against it and prints
// the table.
func run(ctx context.Context, cfg Config) error {
	var missing []error
	for _, v := range [][2]string{{"FERRY_URL", cfg.URL}, {"FERRY_KEY", cfg.Key}, {"DATABASE_URL", cfg.DatabaseURL}} {
		if v[1] == "" {
			missing = append(missing, fmt.Errorf("%s is not set (`ferry dev` prints it)", v[0]))
		}
	}
	if err := errors.Join(missing...); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lab, err := newLab(ctx, cfg)
	if err != nil {
		return err
	}
	defer lab.Close()
	rep, err := lab.Run(ctx)
	if err != nil {
		return err
	}
	rep.Print(os.Stdout)
	if !rep.OK() {
		return fmt.Errorf("a consumer saw what it should not have (see the table)")
	}
	return nil
}
