package main

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Scenario 7: SQL statements per message, from pg_stat_statements.

// stmtPhase is what one phase executed.
type stmtPhase struct {
	messages, requests int64
	stmts              stmtList
}

func (b *Bench) statements(ctx context.Context) (*Section, error) {
	if !b.statementsOK {
		return &Section{Notes: []string{"**Skipped:** " + b.statementsReason + ". " +
			"This scenario needs pg_stat_statements loaded through shared_preload_libraries."}}, nil
	}
	stop, err := b.trackStatements(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	n := int64(b.opts.StatementsMsgs)
	const (
		singleClients = 32
		batch         = 500
		batchClients  = 8
		claim         = 100
		consumers     = 8
	)
	batches := max(4*n/batch, batchClients) // batches of each side
	ids := map[string]int64{}
	for _, q := range []string{"bench-stmt-raw", "bench-stmt-ferry"} {
		id, err := b.createQueue(ctx, q)
		if err != nil {
			return nil, err
		}
		ids[q] = id
	}
	rawID := ids["bench-stmt-raw"]
	single, arr, req := SendRequest(1), bodies(batch), SendRequest(batch)

	// moved counts the messages of the current phase.
	var moved atomic.Int64
	type phase struct {
		name     string
		unit     string // the operation counted in requests
		side     side
		requests int64
		prefill  int64
		queue    string
		run      func(ctx context.Context) error
	}
	// Receive phases are prefilled with a margin, so that no claim comes
	// back short while others hold the last rows.
	received := 4 * n
	prefill := received + claim*consumers
	phases := []phase{
		{"single send", "request", rawSide, n, 0, "bench-stmt-raw", func(ctx context.Context) error {
			return runCounted(ctx, "statements/single/raw", singleClients, n, func(ctx context.Context) error {
				_, err := b.raw.Exec(ctx, rawInsertOne, rawID, body)
				moved.Add(1)
				return err
			})
		}},
		{"single send", "request", ferrySide, n, 0, "bench-stmt-ferry", func(ctx context.Context) error {
			return runCounted(ctx, "statements/single/ferry", singleClients, n, func(ctx context.Context) error {
				moved.Add(1)
				return b.client.Send(ctx, "bench-stmt-ferry", single)
			})
		}},
		{"batch send (500)", "request", rawSide, batches, 0, "bench-stmt-raw", func(ctx context.Context) error {
			return runCounted(ctx, "statements/batch/raw", batchClients, batches, func(ctx context.Context) error {
				_, err := b.raw.Exec(ctx, rawInsertBatch, rawID, arr)
				moved.Add(batch)
				return err
			})
		}},
		{"batch send (500)", "request", ferrySide, batches, 0, "bench-stmt-ferry", func(ctx context.Context) error {
			return runCounted(ctx, "statements/batch/ferry", batchClients, batches, func(ctx context.Context) error {
				moved.Add(batch)
				return b.client.Send(ctx, "bench-stmt-ferry", req)
			})
		}},
		{"receive+ack (100)", "cycle", rawSide, received / claim, prefill, "bench-stmt-raw", func(ctx context.Context) error {
			return runCounted(ctx, "statements/receive/raw", consumers, received/claim, func(ctx context.Context) error {
				claimed, err := rawClaimIDs(ctx, b.raw, rawID, claim)
				if err != nil {
					return err
				}
				_, err = b.raw.Exec(ctx, rawDelete, rawID, claimed)
				moved.Add(int64(len(claimed)))
				return err
			})
		}},
		{"receive+ack (100)", "cycle", ferrySide, received / claim, prefill, "bench-stmt-ferry", func(ctx context.Context) error {
			return runCounted(ctx, "statements/receive/ferry", consumers, received/claim, func(ctx context.Context) error {
				receipts, err := b.client.Receive(ctx, "bench-stmt-ferry", claim, 0)
				if err != nil {
					return err
				}
				moved.Add(int64(len(receipts)))
				return b.client.Ack(ctx, "bench-stmt-ferry", receipts)
			})
		}},
	}
	results := map[string]*[2]stmtPhase{}
	units := map[string]string{} // what a "request" is, per phase
	var order []string
	for _, p := range phases {
		if err := b.reset(ctx); err != nil {
			return nil, err
		}
		if p.prefill > 0 {
			if err := b.fill(ctx, ids[p.queue], int(p.prefill)); err != nil {
				return nil, err
			}
		}
		moved.Store(0)
		stmts, err := b.statementsOf(ctx, false, func() error { return p.run(ctx) })
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", p.name, p.side, err)
		}
		if results[p.name] == nil {
			results[p.name] = &[2]stmtPhase{}
			order = append(order, p.name)
		}
		results[p.name][p.side] = stmtPhase{messages: max(moved.Load(), 1), requests: p.requests, stmts: stmts}
		units[p.name] = p.unit
	}

	return statementsSection(order, results, units, statementsHow(n, batches, received, singleClients, batch, batchClients, claim, consumers)), nil
}
