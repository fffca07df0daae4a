package main

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scenario 13: the SQL API inside an application's transaction. A
// producer's transaction inserts one order row and sends (ferry.send) or
// publishes (ferry.publish, to a topic with 1 and with 10 subscriptions)
// in the same transaction; its raw counterpart is the same transaction
// with a plain INSERT into an outbox table instead (what a team writes
// before it adds a relay). A consumer's transaction receives 100 messages
// and acks them (ferry.receive, ferry.ack), against Ferry's raw claim and
// a DELETE in one transaction. The latency parts (sqlapi_wake.go) measure
// how soon a SQL publish is pushed and wakes a long poll, against REST.

// sqlAPIClients is the concurrency of every part.
const sqlAPIClients = 8

// sqlAPISchema is the application's tables: orders, and the raw side's
// outbox.
const sqlAPISchema = `
	CREATE SCHEMA IF NOT EXISTS bench_app;
	CREATE TABLE IF NOT EXISTS bench_app.orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL);
	CREATE TABLE IF NOT EXISTS bench_app.outbox (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		topic text NOT NULL, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`

// sqlAPIResult is one part's outcome.
type sqlAPIResult struct {
	part       string
	raw, ferry Phase
	pairs      []float64
	// drain is the longest wait, after a publish window, until every
	// event published in it was in the log (the relay's lag).
	drain time.Duration
}

// appTx runs one application transaction in one round trip: BEGIN, the
// order insert, the statement given, COMMIT.
func (b *Bench) appTx(ctx context.Context, order string, sql string, args ...any) error {
	batch := &pgx.Batch{}
	batch.Queue(`BEGIN`)
	batch.Queue(`INSERT INTO bench_app.orders (payload) VALUES ($1::jsonb)`, order)
	batch.Queue(sql, args...)
	batch.Queue(`COMMIT`)
	return b.raw.SendBatch(ctx, batch).Close()
}

func (b *Bench) resetSQLAPI(ctx context.Context) error {
	if _, err := b.raw.Exec(ctx, `TRUNCATE bench_app.orders, bench_app.outbox`); err != nil {
		return err
	}
	return b.resetFanout(ctx)
}

// sqlAPISend compares an order + ferry.send transaction with an order +
// outbox INSERT transaction.
func (b *Bench) sqlAPISend(ctx context.Context) (sqlAPIResult, error) {
	if _, err := b.createQueue(ctx, "bench-sql-send"); err != nil {
		return sqlAPIResult{}, err
	}
	raw, ferry, pairs, err := b.compare(ctx, sideLoads{label: "sql-send", clients: sqlAPIClients,
		prepare: func(side) error { return b.resetSQLAPI(ctx) },
		ops: [2]loadOp{
			func(ctx context.Context, _ int) (int, error) {
				return 1, b.appTx(ctx, body, `INSERT INTO bench_app.outbox (topic, payload) VALUES ('bench-sql-send', $1::jsonb)`, body)
			},
			func(ctx context.Context, _ int) (int, error) {
				return 1, b.appTx(ctx, body, `SELECT * FROM ferry.send('bench-sql-send', $1::jsonb)`, body)
			},
		}})
	return sqlAPIResult{part: "order + ferry.send", raw: raw, ferry: ferry, pairs: pairs}, err
}

// sqlAPIPublish compares an order + ferry.publish transaction, to a topic
// with subs subscriptions, with an order + outbox INSERT transaction.
// After each Ferry window it waits for the relay to append what was
// published, and keeps the longest wait.
func (b *Bench) sqlAPIPublish(ctx context.Context, subs int) (sqlAPIResult, error) {
	name := fmt.Sprintf("bench-sql-publish-%d", subs)
	t, err := b.setupFanoutTopic(ctx, name, subs)
	if err != nil {
		return sqlAPIResult{}, err
	}
	res := sqlAPIResult{part: fmt.Sprintf("order + ferry.publish, %d subscription(s)", subs)}
	var published atomic.Int64
	keys := keyCycle()
	res.raw, res.ferry, res.pairs, err = b.compare(ctx, sideLoads{label: "sql-publish", clients: sqlAPIClients,
		prepare: func(side) error { published.Store(0); return b.resetSQLAPI(ctx) },
		check: func(s side) error {
			if s != ferrySide {
				return nil
			}
			d, err := b.waitAppended(ctx, t.id, published.Load())
			res.drain = max(res.drain, d)
			return err
		},
		ops: [2]loadOp{
			func(ctx context.Context, w int) (int, error) {
				return 1, b.appTx(ctx, body, `INSERT INTO bench_app.outbox (topic, payload) VALUES ($1, $2::jsonb)`, name, body)
			},
			func(ctx context.Context, w int) (int, error) {
				err := b.appTx(ctx, body, `SELECT * FROM ferry.publish($1, $2, $3::jsonb, jsonb_build_object('key', $4::text))`,
					name, eventType, body, keys(w))
				if err == nil {
					published.Add(1)
				}
				return 1, err
			},
		}})
	return res, err
}

// keyCycle returns each worker's next event key, from the bench's key pool.
func keyCycle() func(w int) string {
	var next [sqlAPIClients]int
	return func(w int) string {
		next[w]++
		return fmt.Sprintf("key-%d-%d", w, next[w]%keyPool)
	}
}

// waitAppended waits until the topic's log holds n events (publishes cut
// at the end of the window may add a few more) and says how long it took.
func (b *Bench) waitAppended(ctx context.Context, topicID, n int64) (time.Duration, error) {
	start := time.Now()
	for {
		var got int64
		if err := b.raw.QueryRow(ctx, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, topicID).Scan(&got); err != nil {
			return 0, err
		}
		if got >= n {
			return time.Since(start), nil
		}
		if time.Since(start) > time.Minute {
			return 0, fmt.Errorf("the relay appended %d of %d events in a minute", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sqlAPIReceiveAck compares ferry.receive + ferry.ack in one transaction
// with the raw claim + DELETE in one transaction, both in two round trips.
func (b *Bench) sqlAPIReceiveAck(ctx context.Context) (sqlAPIResult, error) {
	const batch = 100
	ids, err := b.sideQueues(ctx, "bench-sql-recv")
	if err != nil {
		return sqlAPIResult{}, err
	}
	raw, ferry, pairs, err := b.compare(ctx, sideLoads{label: "sql-receive-ack", clients: sqlAPIClients,
		prepare: func(s side) error {
			if err := b.reset(ctx); err != nil {
				return err
			}
			return b.fill(ctx, ids[s], b.opts.Prefill)
		},
		ops: [2]loadOp{
			func(ctx context.Context, _ int) (int, error) {
				var n int
				return n, pgx.BeginFunc(ctx, b.raw, func(tx pgx.Tx) error {
					claimed, err := rawClaimIDs(ctx, tx, ids[rawSide], batch)
					if n = len(claimed); err != nil || n == 0 {
						return cmp.Or(err, errDrained)
					}
					_, err = tx.Exec(ctx, rawDelete, ids[rawSide], claimed)
					return err
				})
			},
			func(ctx context.Context, _ int) (int, error) {
				var n int
				return n, pgx.BeginFunc(ctx, b.raw, func(tx pgx.Tx) error {
					rows, err := tx.Query(ctx, `SELECT receipt FROM ferry.receive('bench-sql-recv-ferry', $1)`, batch)
					if err != nil {
						return err
					}
					receipts, err := pgx.CollectRows(rows, pgx.RowTo[string])
					if n = len(receipts); err != nil || n == 0 {
						return cmp.Or(err, errDrained)
					}
					_, err = tx.Exec(ctx, `SELECT * FROM ferry.ack('bench-sql-recv-ferry', $1)`, receipts)
					return err
				})
			},
		}})
	return sqlAPIResult{part: "ferry.receive + ferry.ack (100)", raw: raw, ferry: ferry, pairs: pairs}, err
}

// sqlAPI is scenario 13.
func (b *Bench) sqlAPI(ctx context.Context) (*Section, error) {
	if _, err := b.raw.Exec(ctx, sqlAPISchema); err != nil {
		return nil, fmt.Errorf("application tables: %w", err)
	}
	var results []sqlAPIResult
	for _, part := range []func(context.Context) (sqlAPIResult, error){
		b.sqlAPISend,
		func(ctx context.Context) (sqlAPIResult, error) { return b.sqlAPIPublish(ctx, 1) },
		func(ctx context.Context) (sqlAPIResult, error) { return b.sqlAPIPublish(ctx, 10) },
		b.sqlAPIReceiveAck,
	} {
		r, err := part(ctx)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	w, err := b.sqlAPILatency(ctx)
	if err != nil {
		return nil, err
	}
	return sqlAPISection(results, w, b.opts.Duration, b.opts.Prefill, b.roundsNote), nil
}
