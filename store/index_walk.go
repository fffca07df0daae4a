package store

import (
	"context"
	"fmt"
)

// Walks: how a statement reads "the first n rows of a queue" (or of an
// index) in work proportional to n whatever the planner believes
// (DESIGN.md invariant 11).
//
// "WHERE queue_id = $1 ORDER BY id LIMIT n" is a cliff: a planner that
// believes the queue holds fewer than n rows (a queue that was small at
// the last ANALYZE, a table never analyzed) sees no gain in stopping
// early, reads the whole queue with a bitmap scan, then sorts. (Without
// ORDER BY, a bitmap scan still reads every index entry of the queue
// before it returns a row.) A walk asks for one row at a time instead:
// each step is "the next key after this one, ORDER BY key LIMIT 1", for
// which reading one index entry beats reading all of them under any
// estimate, and the statement stops the walk with its own LIMIT.

// Driving sets. A DML statement finds its rows from its driving set,
// joined to it (m.queue_id = v.queue_id AND m.id = v.id: one primary-key
// probe a row; or m.ctid = v.ctid, one TID fetch a row, where no other
// transaction can update the rows meanwhile: a ctid condition is checked
// again on a row's newest version, which has moved, so an updated row
// would be skipped), and the driving set ends in a LIMIT whose value is a
// parameter. That LIMIT is also the
// set's bound, but it is there for plans made before the value is known:
// a generic plan takes an unknown LIMIT for a tenth of its input, so it
// believes the set is a row or two, and a probe each then beats any
// scan of the target, even of one the plan believes small (planned while
// the table was empty). A set that came out of a walk (which a generic
// plan believes is about a hundred rows) is read through a second such
// LIMIT for the same reason. Custom plans know the value and the table's
// true size, and take the probes anyway.

// walkKeys is the recursive CTE "walk" (the statement must say WITH
// RECURSIVE): queue $1's rows of ferry.table in ascending order of key,
// starting after the SQL expression after and satisfying cond (an extra
// condition on x, e.g. "AND x.id <= $3"; "" for none), one primary-key
// probe each, with the columns key and cols (a list of x's columns, each
// after a comma, e.g. ", x.ctid"). (queue_id, key) must be the table's
// primary key. Read it as (SELECT ... FROM walk LIMIT n).
func walkKeys(table, key, after, cond, cols string) string {
	step := func(from string) string {
		return fmt.Sprintf(`SELECT x.%[2]s%[5]s FROM ferry.%[1]s x
				WHERE x.queue_id = $1 AND x.%[2]s > %[3]s %[4]s ORDER BY x.%[2]s LIMIT 1`, table, key, from, cond, cols)
	}
	return fmt.Sprintf(`walk AS (
			(%s)
			UNION ALL
			SELECT n.* FROM walk w CROSS JOIN LATERAL (%s) n
		)`, step(after), step("w."+key))
}

// walkValues is the recursive CTE "walk(v)" (the statement must say WITH
// RECURSIVE): the distinct values of column col of ferry.table's rows that
// satisfy scope (a condition on x that the index on col starts with, e.g.
// "x.queue_id = $1 AND", or "") and lie below the SQL expression below, in
// ascending order, one index probe each. The rows of one value are then
// read per value: a value is one transaction's now(), so it holds at most
// one transaction's rows.
func walkValues(table, col, scope, below string) string {
	step := func(from string) string {
		return fmt.Sprintf(`SELECT x.%[2]s FROM ferry.%[1]s x
				WHERE %[3]s x.%[2]s > %[4]s AND x.%[2]s < %[5]s ORDER BY x.%[2]s LIMIT 1`, table, col, scope, from, below)
	}
	return fmt.Sprintf(`walk(v) AS (
			(%s)
			UNION ALL
			SELECT n.* FROM walk w CROSS JOIN LATERAL (%s) n
		)`, step("'-infinity'"), step("w.v"))
}

// ringPlannerSQL makes the rest of its transaction plan as the engine's
// functions do (store/definitions, SET enable_seqscan = off ...):
// ferry.messages is partitioned (package doc, # Held snapshots), and a
// partition the planner believes empty (truncated, or analyzed while
// empty) would otherwise be read whole by a sequential scan for every
// probe, or its rows sorted whole where a merge of index scans stops
// after LIMIT rows. Every statement of the store on ferry.messages is a
// walk of index probes, so it loses nothing to these. Run first in the
// transactions (or batches: one implicit transaction) of those statements.
// JIT is off with them: a plan that keeps a node they disable (a sort
// nothing else can do) costs 10^10, far past jit_above_cost, and
// PostgreSQL then compiled the statement (700 ms measured for a purge of
// two messages).
// Sorts stay on where a statement sorts what it read (a backfill orders
// its window's events): ringPlannerSQL is for the transactions whose
// statements read ferry.messages "ORDER BY id LIMIT n", ringProbesSQL for
// the others.
const (
	ringPlannerSQL = `/* ferry:ring_planner */ SELECT set_config('jit', 'off', true), set_config('enable_seqscan', 'off', true),
	set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('enable_incremental_sort', 'off', true)`
	ringProbesSQL = `/* ferry:ring_probes */ SELECT set_config('jit', 'off', true), set_config('enable_seqscan', 'off', true),
	set_config('enable_sort', 'on', true), set_config('enable_bitmapscan', 'off', true),
	set_config('enable_incremental_sort', 'off', true)`
)

// ringPlanner runs ringPlannerSQL in tx.
func ringPlanner(ctx context.Context, tx DBTX) error {
	_, err := tx.Exec(ctx, ringPlannerSQL)
	return err
}

// ringProbes runs ringProbesSQL in tx.
func ringProbes(ctx context.Context, tx DBTX) error {
	_, err := tx.Exec(ctx, ringProbesSQL)
	return err
}
