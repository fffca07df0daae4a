package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-mq/ferry/client"
)

// Config says which Ferry the lab runs against and how.
type Config struct {
	URL, Key, DatabaseURL string
	// Orders is how many orders the orders service places.
	Orders int
	// Faults turns on the injected failures: rolled-back and retried
	// order transactions, payment workers killed before their commit,
	// failed webhook attempts, nacked inventory deliveries and an
	// analytics member that leaves halfway.
	Faults bool
}

// Lab is one run: its own topic, subscriptions, group and tables (names
// carry a run id, so runs against one Ferry do not meet).
type Lab struct {
	cfg    Config
	pool   *pgxpool.Pool
	client *client.Client
	run    string // run id
	topic  string
	schema string
	hook   *httptest.Server
	secret string // the email subscription's signing secret

	orders    *ordersService
	payment   *paymentService
	email     *emailReceiver
	inventory *inventoryConsumer
	analytics *analyticsGroup
}

// poisonOrder is the order whose amount payment cannot handle until it is
// fixed.
const poisonOrder = 13

func newLab(ctx context.Context, cfg Config) (*Lab, error) {
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	var raw [4]byte
	_, _ = rand.Read(raw[:])
	run := hex.EncodeToString(raw[:])
	l := &Lab{
		cfg: cfg, pool: pool, client: client.New(cfg.URL, cfg.Key), run: run,
		topic: "orders-" + run, schema: "lab_" + run,
	}
	l.email = newEmailReceiver(cfg.Faults)
	l.hook = httptest.NewServer(l.email)
	if err := l.setup(ctx); err != nil {
		l.Close()
		return nil, err
	}
	l.email.secret = l.secret
	l.orders = &ordersService{lab: l}
	l.payment = &paymentService{lab: l, fixed: make(chan struct{})}
	l.inventory = &inventoryConsumer{lab: l, seen: map[string][]string{}}
	l.analytics = &analyticsGroup{lab: l, seen: map[string]bool{}}
	return l, nil
}

// Close removes the run's tables and stops the webhook receiver (the
// topic stays, to be looked at).
func (l *Lab) Close() {
	if l.hook != nil {
		l.hook.Close()
	}
	_, _ = l.pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{l.schema}.Sanitize()+` CASCADE`)
	l.pool.Close()
}

// setup makes the topic, its subscriptions and the application's tables.
func (l *Lab) setup(ctx context.Context) error {
	s := pgx.Identifier{l.schema}.Sanitize()
	if _, err := l.pool.Exec(ctx, `CREATE SCHEMA `+s+`;
		CREATE TABLE `+s+`.orders (id text PRIMARY KEY, amount integer NOT NULL, shipped boolean NOT NULL DEFAULT false);
		CREATE TABLE `+s+`.charges (order_id text PRIMARY KEY, amount integer NOT NULL, charged_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("tables: %w", err)
	}
	retry := func(c client.SubscriptionConfig) client.SubscriptionConfig {
		c.RetryMinSeconds, c.RetryMaxSeconds = client.Ptr(0), client.Ptr(1)
		return c
	}
	created := &client.Filter{Types: []string{"order.created"}}
	subs := []struct {
		name string
		cfg  client.SubscriptionConfig
	}{
		{"payment", client.SubscriptionConfig{Filter: created, VisibilityTimeoutSeconds: client.Ptr(1), MaxReceives: client.Ptr(3)}},
		{"email", client.SubscriptionConfig{Filter: created, MaxReceives: client.Ptr(10),
			Push: &client.PushConfig{URL: l.hook.URL, TimeoutSeconds: client.Ptr(5)}}},
		{"inventory", client.SubscriptionConfig{Ordered: client.Ptr(true), VisibilityTimeoutSeconds: client.Ptr(5), MaxReceives: client.Ptr(10)}},
	}
	if _, _, err := l.client.PutTopic(ctx, l.topic, client.TopicConfig{Partitions: client.Ptr(4)}); err != nil {
		return err
	}
	for _, sub := range subs {
		s, _, err := l.client.PutSubscription(ctx, l.topic, sub.name, retry(sub.cfg))
		if err != nil {
			return err
		}
		if sub.name == "email" {
			l.secret = s.SigningSecret
		}
	}
	return nil
}

func (l *Lab) table(name string) string { return pgx.Identifier{l.schema, name}.Sanitize() }

// Run places the orders, runs every consumer until each has done all it
// should (or ctx ends) and reports what each saw.
func (l *Lab) Run(parent context.Context) (*Report, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	start := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	start("payment", l.payment.run)
	start("payment", l.payment.run) // two competing workers
	start("inventory", l.inventory.run)
	start("analytics", l.analytics.run)
	start("operator", l.payment.redrivePoison)
	if err := l.orders.run(ctx); err != nil {
		return nil, fmt.Errorf("orders: %w", err)
	}
	done := l.waitDone(ctx, errs)
	cancel()
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return l.report(parent), done
}

// waitDone waits until every consumer has seen everything the committed
// orders published, or ctx ends, or a consumer fails.
func (l *Lab) waitDone(ctx context.Context, errs chan error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if l.complete(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not every consumer finished: %w", ctx.Err())
		case err := <-errs:
			errs <- err
			return err
		case <-tick.C:
		}
	}
}

// complete reports whether every consumer saw all it should.
func (l *Lab) complete(ctx context.Context) bool {
	want := len(l.orders.committed)
	charged, err := l.payment.charges(ctx)
	return err == nil && charged == want &&
		l.email.unique() == want &&
		l.inventory.complete(l.orders.committed) &&
		l.analytics.unique() == 2*want
}
