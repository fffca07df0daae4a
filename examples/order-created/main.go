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
// Run it with no arguments: it starts Ferry in-process on a private,
// throwaway PostgreSQL (what `ferry dev` does), runs the lab and stops.
// Against a running Ferry (`ferry dev` prints these), give its base URL,
// admin key and database URL:
//
//	go run ./examples/order-created
//	go run ./examples/order-created -url http://127.0.0.1:8080 -key fk_... -db postgres://...
//
// The Ferry it runs against must allow push to loopback URLs
// (FERRY_ALLOW_PRIVATE_PUSH, on in `ferry dev`). It exits 1 if a consumer
// saw something it should not have.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/internal/server"
)

func main() {
	var (
		url    = flag.String("url", "", "Ferry's base URL (default: start one in-process)")
		key    = flag.String("key", "", "an admin key of that Ferry")
		db     = flag.String("db", "", "the database URL of that Ferry")
		orders = flag.Int("orders", 40, "orders to place")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *url, *key, *db, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "order-created:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, key, db string, orders int) error {
	if url == "" {
		stopFerry, err := startFerry(ctx, &url, &key, &db)
		if err != nil {
			return err
		}
		defer stopFerry()
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lab, err := newLab(ctx, Config{URL: url, Key: key, DatabaseURL: db, Orders: orders, Faults: true})
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

// startFerry starts a private PostgreSQL in a temporary directory and a
// Ferry on it, as `ferry dev` does, and sets url, key and db to them.
func startFerry(ctx context.Context, url, key, db *string) (func(), error) {
	dir, err := os.MkdirTemp("", "ferry-lab-")
	if err != nil {
		return nil, err
	}
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: filepath.Join(dir, "pg")})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("private PostgreSQL: %w", err)
	}
	cfg := server.DefaultConfig()
	cfg.DatabaseURL, cfg.Listen, cfg.AdminKey = cluster.URL("postgres"), "127.0.0.1:0", "lab-admin-key-0123456789"
	cfg.AllowPrivatePush, cfg.LogLevel = true, "warn"
	s, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		_ = cluster.Stop(context.Background())
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.Start()
	*url, *key, *db = s.URL(), cfg.AdminKey, cfg.DatabaseURL
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = s.Shutdown(sctx)
		_ = cluster.Stop(context.Background())
		_ = os.RemoveAll(dir)
	}, nil
}
