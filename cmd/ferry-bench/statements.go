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

// Scenario 7's phases: single sends by stmtSingleClients, batches of
// stmtBatch by stmtBatchClients, receives of stmtClaim (and their acks) by
// stmtConsumers.
const (
	stmtSingleClients = 32
	stmtBatch         = 500
	stmtBatchClients  = 8
	stmtClaim         = 100
	stmtConsumers     = 8
)

// stmtPhaseRun is one phase of scenario 7 on one side.
type stmtPhaseRun struct {
	name     string
	unit     string // the operation counted in requests
	side     side
	requests int64
	prefill  int64
	run      func(ctx context.Context) error
}

// statementPhases are scenario 7's phases for n messages on the queues
// ids (by side); each counts the messages it moves into moved.
func (b *Bench) statementPhases(n int64, ids [2]int64, moved *atomic.Int64) []stmtPhaseRun {
	batches := max(4*n/stmtBatch, stmtBatchClients) // batches of each side
	// Receive phases are prefilled with a margin, so that no claim comes
	// back short while others hold the last rows.
	received := 4 * n
	prefill := received + stmtClaim*stmtConsumers
	rawID, ferryQ := ids[rawSide], "bench-stmt-ferry"
	single, arr, req := SendRequest(1), bodies(stmtBatch), SendRequest(stmtBatch)
	counted := func(label string, workers int, ops int64, op func(ctx context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error { return runCounted(ctx, "statements/"+label, workers, ops, op) }
	}
	return []stmtPhaseRun{
		{"single send", "request", rawSide, n, 0, counted("single/raw", stmtSingleClients, n, func(ctx context.Context) error {
			_, err := b.raw.Exec(ctx, rawInsertOne, rawID, body)
			moved.Add(1)
			return err
		})},
		{"single send", "request", ferrySide, n, 0, counted("single/ferry", stmtSingleClients, n, func(ctx context.Context) error {
			moved.Add(1)
			return b.client.Send(ctx, ferryQ, single)
		})},
		{"batch send (500)", "request", rawSide, batches, 0, counted("batch/raw", stmtBatchClients, batches, func(ctx context.Context) error {
			_, err := b.raw.Exec(ctx, rawInsertBatch, rawID, arr)
			moved.Add(stmtBatch)
			return err
		})},
		{"batch send (500)", "request", ferrySide, batches, 0, counted("batch/ferry", stmtBatchClients, batches, func(ctx context.Context) error {
			moved.Add(stmtBatch)
			return b.client.Send(ctx, ferryQ, req)
		})},
		{"receive+ack (100)", "cycle", rawSide, received / stmtClaim, prefill, counted("receive/raw", stmtConsumers, received/stmtClaim, func(ctx context.Context) error {
			claimed, err := rawClaimIDs(ctx, b.raw, rawID, stmtClaim)
			if err != nil {
				return err
			}
			_, err = b.raw.Exec(ctx, rawDelete, rawID, claimed)
			moved.Add(int64(len(claimed)))
			return err
		})},
		{"receive+ack (100)", "cycle", ferrySide, received / stmtClaim, prefill, counted("receive/ferry", stmtConsumers, received/stmtClaim, func(ctx context.Context) error {
			receipts, err := b.client.Receive(ctx, ferryQ, stmtClaim, 0)
			if err != nil {
				return err
			}
			moved.Add(int64(len(receipts)))
			return b.client.Ack(ctx, ferryQ, receipts)
		})},
	}
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
	ids, err := b.sideQueues(ctx, "bench-stmt")
	if err != nil {
		return nil, err
	}
	n := int64(b.opts.StatementsMsgs)
	var moved atomic.Int64 // the messages of the current phase
	results := map[string]*[2]stmtPhase{}
	units := map[string]string{} // what a "request" is, per phase
	var order []string
	for _, p := range b.statementPhases(n, ids, &moved) {
		if err := b.reset(ctx); err != nil {
			return nil, err
		}
		if p.prefill > 0 {
			if err := b.fill(ctx, ids[p.side], int(p.prefill)); err != nil {
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
	batches := max(4*n/stmtBatch, stmtBatchClients)
	how := statementsHow(n, batches, 4*n, stmtSingleClients, stmtBatch, stmtBatchClients, stmtClaim, stmtConsumers)
	return statementsSection(order, results, units, how), nil
}
