package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	client *http.Client
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
		cfg: cfg, pool: pool, client: &http.Client{Timeout: 30 * time.Second}, run: run,
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
	retry := map[string]any{"retry_min_seconds": 0, "retry_max_seconds": 1}
	subs := []struct {
		name string
		body map[string]any
	}{
		{"payment", map[string]any{"filter": map[string]any{"types": []string{"order.created"}},
			"visibility_timeout_seconds": 1, "max_receives": 3}},
		{"email", map[string]any{"filter": map[string]any{"types": []string{"order.created"}},
			"max_receives": 10, "push": map[string]any{"url": l.hook.URL, "timeout_seconds": 5}}},
		{"inventory", map[string]any{"ordered": true, "visibility_timeout_seconds": 5, "max_receives": 10}},
	}
	if err := l.call(ctx, http.MethodPut, "/v1/topics/"+l.topic, map[string]any{"partitions": 4}, nil); err != nil {
		return err
	}
	for _, sub := range subs {
		for k, v := range retry {
			sub.body[k] = v
		}
		var created struct {
			SigningSecret string `json:"signing_secret"`
		}
		if err := l.call(ctx, http.MethodPut, l.subPath(sub.name), sub.body, &created); err != nil {
			return err
		}
		if sub.name == "email" {
			l.secret = created.SigningSecret
		}
	}
	return nil
}

func (l *Lab) subPath(sub string) string { return "/v1/topics/" + l.topic + "/subscriptions/" + sub }

func (l *Lab) table(name string) string { return pgx.Identifier{l.schema, name}.Sanitize() }

// call makes a REST call and decodes a 2xx answer into out (if not nil).
func (l *Lab) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, l.cfg.URL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+l.cfg.Key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil && len(raw) > 0 {
		return json.Unmarshal(raw, out)
	}
	return nil
}

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
