package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-mq/ferry/client"
)

// ordersService places orders: each order row and its order.created event
// in one transaction (ferry.publish), its order.shipped in a later one.
type ordersService struct {
	lab *Lab
	// committed lists the orders whose transaction committed (set when
	// run returns).
	committed  []string
	rolledBack []string
	// duplicates counts publishes Ferry answered as duplicates (the
	// retried commits), retried how many were retried.
	duplicates, retried int
}

func orderID(i int) string { return fmt.Sprintf("ord-%03d", i) }

func (o *ordersService) run(ctx context.Context) error {
	l := o.lab
	for i := 1; i <= l.cfg.Orders; i++ {
		id, amount := orderID(i), 10+i
		if i == poisonOrder {
			amount = -1 // payment cannot charge this until it is fixed
		}
		rollback := l.cfg.Faults && i%7 == 0
		if err := o.place(ctx, id, amount, rollback); err != nil {
			return err
		}
		if rollback {
			o.rolledBack = append(o.rolledBack, id)
			continue
		}
		o.committed = append(o.committed, id)
		if l.cfg.Faults && i%5 == 0 {
			// The commit's answer was "lost": the service does it all
			// again. Its row is there already; Ferry knows the event id.
			o.retried++
			if err := o.place(ctx, id, amount, false); err != nil {
				return err
			}
		}
		if err := o.ship(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// place inserts the order and publishes order.created in one transaction,
// and commits it or rolls it back.
func (o *ordersService) place(ctx context.Context, id string, amount int, rollback bool) error {
	l := o.lab
	return o.tx(ctx, rollback, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+l.table("orders")+` (id, amount) VALUES ($1, $2) ON CONFLICT DO NOTHING`, id, amount); err != nil {
			return err
		}
		return o.publish(ctx, tx, "order.created", id, map[string]any{"order_id": id, "amount": amount})
	})
}

// ship marks the order shipped and publishes order.shipped, keyed by the
// order like its order.created.
func (o *ordersService) ship(ctx context.Context, id string) error {
	l := o.lab
	return o.tx(ctx, false, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE `+l.table("orders")+` SET shipped = true WHERE id = $1`, id); err != nil {
			return err
		}
		return o.publish(ctx, tx, "order.shipped", id, map[string]any{"order_id": id})
	})
}

func (o *ordersService) publish(ctx context.Context, tx pgx.Tx, typ, id string, data map[string]any) error {
	var (
		eventID   string
		partition int
		duplicate bool
	)
	err := tx.QueryRow(ctx, `SELECT id, "partition", duplicate FROM ferry.publish($1, $2, $3, $4)`,
		o.lab.topic, typ, data, map[string]any{"id": typ + "/" + id, "key": id}).Scan(&eventID, &partition, &duplicate)
	if err != nil {
		return fmt.Errorf("ferry.publish: %w", err)
	}
	if duplicate {
		o.duplicates++
	}
	return nil
}

func (o *ordersService) tx(ctx context.Context, rollback bool, fn func(pgx.Tx) error) error {
	tx, err := o.lab.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := fn(tx); err != nil {
		return err
	}
	if rollback {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

// paymentService charges orders: a SQL consumer of the payment
// subscription that records the charge and acks in one transaction.
type paymentService struct {
	lab   *Lab
	fixed chan struct{} // closed once the poison order can be charged
	once  sync.Once

	mu         sync.Mutex
	delivered  int // events received
	crashes    int // transactions killed before their commit
	nacked     int // poison deliveries failed
	conflicts  int // charges already there (never, if exactly once holds)
	redriven   int
	batchCount int
}

// run is one payment worker. Every few batches it dies at some step
// before its commit (its connection is closed: Postgres rolls back the
// charge and the ack together) and starts again on a new connection.
func (p *paymentService) run(ctx context.Context) error {
	target := p.lab.topic + "/payment"
	for ctx.Err() == nil {
		conn, err := p.lab.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		got, err := p.batch(ctx, conn.Conn(), target)
		conn.Release() // a crashed worker's connection is closed: the pool drops it
		if errors.Is(err, errCrash) {
			continue
		}
		if err != nil {
			return err
		}
		if got == 0 {
			select { // ferry.receive does not wait: the worker's own idle pause
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return ctx.Err()
}

var errCrash = errors.New("crashed")

// crashAt says at which step of a batch the worker dies this time: 0
// (never), 1 (after receiving), 2 (after charging), 3 (after acking).
func (p *paymentService) crashAt() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batchCount++
	if !p.lab.cfg.Faults || p.batchCount%3 != 0 {
		return 0
	}
	return 1 + (p.batchCount/3)%3
}

// payment is one delivery of the payment service's subscription: an
// order.created event and the receipt to ack or nack it with.
type payment struct {
	id, receipt string
	event       struct {
		Data struct {
			OrderID string `json:"order_id"`
			Amount  int    `json:"amount"`
		} `json:"data"`
	}
}

// receivePayments claims up to 5 deliveries of target in tx (ferry.receive).
func receivePayments(ctx context.Context, tx pgx.Tx, target string) ([]payment, error) {
	rows, err := tx.Query(ctx, `SELECT id, body, receipt FROM ferry.receive($1, 5)`, target)
	if err != nil {
		return nil, fmt.Errorf("ferry.receive: %w", err)
	}
	defer rows.Close()
	var got []payment
	for rows.Next() {
		var (
			d    payment
			body []byte
		)
		if err := rows.Scan(&d.id, &body, &d.receipt); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(body, &d.event); err != nil {
			return nil, err
		}
		got = append(got, d)
	}
	return got, rows.Err()
}

func (p *paymentService) batch(ctx context.Context, conn *pgx.Conn, target string) (int, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	got, err := receivePayments(ctx, tx, target)
	if err != nil {
		return 0, err
	}
	if len(got) == 0 {
		return 0, tx.Commit(ctx)
	}
	p.count(func() { p.delivered += len(got) })
	crash := p.crashAt()
	if crash == 1 {
		return len(got), p.crash(conn)
	}
	var ack, fail []string
	for _, d := range got {
		amount := d.event.Data.Amount
		if amount < 0 {
			select {
			case <-p.fixed: // the fix: a negative amount is charged as nothing
				amount = 0
			default:
				fail = append(fail, d.receipt)
				continue
			}
		}
		tag, err := tx.Exec(ctx, `INSERT INTO `+p.lab.table("charges")+` (order_id, amount) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
			d.event.Data.OrderID, amount)
		if err != nil {
			return 0, err
		}
		if tag.RowsAffected() == 0 {
			p.count(func() { p.conflicts++ })
		}
		ack = append(ack, d.receipt)
	}
	if crash == 2 {
		return len(got), p.crash(conn)
	}
	if len(ack) > 0 {
		if _, err := tx.Exec(ctx, `SELECT * FROM ferry.ack($1, $2)`, target, ack); err != nil {
			return 0, fmt.Errorf("ferry.ack: %w", err)
		}
	}
	if len(fail) > 0 {
		if _, err := tx.Exec(ctx, `SELECT * FROM ferry.nack($1, $2, $3)`, target, fail, map[string]any{"error": "negative amount"}); err != nil {
			return 0, fmt.Errorf("ferry.nack: %w", err)
		}
	}
	if crash == 3 {
		return len(got), p.crash(conn)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	p.count(func() { p.nacked += len(fail) })
	return len(got), nil
}

// crash kills the worker in the middle of its transaction: its
// connection is gone before a commit or rollback, as when the process
// dies, and Postgres rolls the transaction back.
func (p *paymentService) crash(conn *pgx.Conn) error {
	p.count(func() { p.crashes++ })
	_ = conn.Close(context.Background())
	return errCrash
}

func (p *paymentService) count(fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn()
}

// charges counts the orders charged.
func (p *paymentService) charges(ctx context.Context) (int, error) {
	var n int
	err := p.lab.pool.QueryRow(ctx, `SELECT count(*) FROM `+p.lab.table("charges")).Scan(&n)
	return n, err
}

// redrivePoison is the operator: it waits for the poison order to reach
// the payment dead letters, "deploys the fix" and redrives it.
func (p *paymentService) redrivePoison(ctx context.Context) error {
	poison := "order.created/" + orderID(poisonOrder)
	if !p.lab.cfg.Faults || poisonOrder > p.lab.cfg.Orders || poisonOrder%7 == 0 {
		p.once.Do(func() { close(p.fixed) })
		return nil
	}
	for ctx.Err() == nil {
		page, err := p.lab.client.ListSubscriptionDeadLetters(ctx, p.lab.topic, "payment", client.Page{})
		if err != nil {
			return err
		}
		for _, m := range page.Messages {
			if m.ID != poison {
				continue
			}
			p.once.Do(func() { close(p.fixed) })
			n, err := p.lab.client.RedriveSubscriptionDeadLetters(ctx, p.lab.topic, "payment", client.Redrive{IDs: []string{poison}})
			p.count(func() { p.redriven += int(n) })
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return ctx.Err()
}

// emailReceiver is the email service: a webhook endpoint that checks the
// Standard Webhooks signature and sends each email once per webhook-id.
type emailReceiver struct {
	secret string
	faults bool

	mu         sync.Mutex
	sent       map[string]bool // webhook-id → sent
	attempts   map[string]int
	deliveries int
	failed     int // attempts answered 503 on purpose
	badSig     int
}

func newEmailReceiver(faults bool) *emailReceiver {
	return &emailReceiver{faults: faults, sent: map[string]bool{}, attempts: map[string]int{}}
}

func (r *emailReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	id := req.Header.Get("webhook-id")
	r.mu.Lock()
	defer r.mu.Unlock()
	if !verifySignature(r.secret, id, req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature"), body) {
		r.badSig++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	r.deliveries++
	r.attempts[id]++
	if r.faults && len(r.attempts)%4 == 0 && r.attempts[id] == 1 {
		r.failed++ // the mail server is down: Ferry retries
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	r.sent[id] = true // a repeat of a sent id is answered 2xx and not sent again
	w.WriteHeader(http.StatusNoContent)
}

// verifySignature checks a Standard Webhooks signature: some "v1,<base64
// HMAC-SHA256 of id.timestamp.body>" of the header, keyed by the secret's
// bytes (after "whsec_"), and a timestamp within five minutes.
func verifySignature(secret, id, timestamp, header string, body []byte) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || id == "" {
		return false
	}
	var ts int64
	if _, err := fmt.Sscan(timestamp, &ts); err != nil || time.Since(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(header) {
		if v, ok := strings.CutPrefix(sig, "v1,"); ok && hmac.Equal([]byte(v), []byte(want)) {
			return true
		}
	}
	return false
}

func (r *emailReceiver) unique() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sent)
}
