package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// Scenario 7: SQL statements per message, from pg_stat_statements.

// stmtStat is one normalised statement's counters over a phase.
type stmtStat struct {
	query  string
	calls  int64
	rows   int64
	execMs float64
}

// stmtPhase is what one phase executed.
type stmtPhase struct {
	messages, requests int64
	stmts              []stmtStat
}

func (p stmtPhase) calls() (n int64) {
	for _, s := range p.stmts {
		n += s.calls
	}
	return n
}

func (p stmtPhase) execMs() (ms float64) {
	for _, s := range p.stmts {
		ms += s.execMs
	}
	return ms
}

// runCounted runs op from workers goroutines until ops operations have run
// (or the first error, which it returns).
func runCounted(ctx context.Context, label string, workers int, ops int64, op func(ctx context.Context) error) error {
	_, err := runBounded(ctx, label, workers, ops, 0, time.Time{}, func(ctx context.Context, _ int) error { return op(ctx) })
	return err
}

// statementsOf resets pg_stat_statements, runs fn and returns what this
// database executed meanwhile, leaving out River's background statements
// and the bench's own bookkeeping.
func (b *Bench) statementsOf(ctx context.Context, fn func() error) ([]stmtStat, error) {
	if _, err := b.raw.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return nil, err
	}
	if err := fn(); err != nil {
		return nil, err
	}
	rows, err := b.raw.Query(ctx, `
		SELECT query, calls, rows, total_exec_time FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND query !~* 'river|pg_stat_statements'
		ORDER BY calls DESC, query`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []stmtStat
	for rows.Next() {
		var s stmtStat
		if err := rows.Scan(&s.query, &s.calls, &s.rows, &s.execMs); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func (b *Bench) statements(ctx context.Context) (*Section, error) {
	if !b.statementsOK {
		return &Section{Notes: []string{"**Skipped:** " + b.statementsReason + ". " +
			"This scenario needs pg_stat_statements loaded through shared_preload_libraries."}}, nil
	}
	if b.cluster != nil {
		if err := b.setTracking(ctx, "top"); err != nil {
			return nil, err
		}
		defer func() { _ = b.setTracking(context.Background(), "none") }()
	}
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
		stmts, err := b.statementsOf(ctx, func() error { return p.run(ctx) })
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

	var rows []Row
	var grids []Grid
	for _, name := range order {
		r, f := results[name][rawSide], results[name][ferrySide]
		per := func(p stmtPhase, d int64) float64 { return float64(p.calls()) / float64(d) }
		rows = append(rows,
			Row{Metric: name + ": statements per message", Raw: fmt.Sprintf("%.3f", per(r, r.messages)), Ferry: fmt.Sprintf("%.3f", per(f, f.messages)),
				Ratio: ratioOf(per(f, f.messages), per(r, r.messages))},
			Row{Metric: name + ": statements per " + units[name], Raw: fmt.Sprintf("%.2f", per(r, r.requests)), Ferry: fmt.Sprintf("%.2f", per(f, f.requests)),
				Ratio: ratioOf(per(f, f.requests), per(r, r.requests))},
			Row{Metric: name + ": PostgreSQL execution µs per message", Raw: fmt.Sprintf("%.1f", r.execMs()*1000/float64(r.messages)),
				Ferry: fmt.Sprintf("%.1f", f.execMs()*1000/float64(f.messages)), Ratio: ratioOf(f.execMs()/float64(f.messages), r.execMs()/float64(r.messages))},
		)
		g := Grid{
			Caption: fmt.Sprintf("%s, Ferry (%s messages in %s %ss): every statement", name, fmtInt(f.messages), fmtInt(f.requests), units[name]),
			Header:  []string{"statement", "calls", "per " + units[name], "rows/call", "mean ms"},
		}
		for _, s := range f.stmts {
			g.Rows = append(g.Rows, []string{"`" + shortSQL(s.query) + "`", fmtInt(s.calls),
				fmt.Sprintf("%.2f", float64(s.calls)/float64(f.requests)),
				fmt.Sprintf("%.1f", float64(s.rows)/float64(max(s.calls, 1))),
				fmt.Sprintf("%.3f", s.execMs/float64(max(s.calls, 1)))})
		}
		grids = append(grids, g)
	}
	return &Section{
		Rows:  rows,
		Grids: grids,
		How: fmt.Sprintf("pg_stat_statements (track = top, so statements run by triggers and functions are inside their caller) is reset before "+
			"each phase and read after it; statements mentioning River or pg_stat_statements are left out, BEGIN and COMMIT are counted "+
			"(River's own background transactions may add a handful). Phases, each on a freshly truncated table: %s single sends by %d clients; "+
			"%s batches of %d by %d clients; %s messages received in batches of %d and acked by %d consumers (prefilled; a cycle is one "+
			"claim and one delete for raw SQL, one receive and one ack request for Ferry). The raw side's statements are exactly the ones shown "+
			"in scenarios 1-3. "+
			"Execution time is PostgreSQL's `total_exec_time`, excluding network and commit waits.",
			fmtInt(n), singleClients, fmtInt(batches), batch, batchClients, fmtInt(received), claim, consumers),
	}, nil
}

var spaces = regexp.MustCompile(`\s+`)

// shortSQL collapses a statement to one line of at most 110 characters,
// safe inside a markdown table cell and a code span.
func shortSQL(q string) string {
	q = strings.TrimSpace(spaces.ReplaceAllString(q, " "))
	if r := []rune(q); len(r) > 110 {
		q = string(r[:107]) + "..."
	}
	q = strings.ReplaceAll(q, "|", "\\|")
	return strings.ReplaceAll(q, "`", "'")
}
