package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The raw-SQL side: what a team would write by hand on Ferry's schema. It
// writes the same columns Ferry writes, so the same triggers and indexes
// run; it skips what makes Ferry a broker (dedup, groups, max_depth, queue
// lookup by name, dead-lettering, receipts checked on ack).

// rawInsertBatch inserts one message per element of $2 in one statement
// (its own transaction), ids from Ferry's sequence.
const rawInsertBatch = `
	INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, grp, dedup_id, attributes, body)
	SELECT $1, nextval('ferry.message_id_seq'), now(), false, NULL, NULL, NULL, b::json
	FROM unnest($2::text[]) AS b`

// rawInsertOne inserts one message in one statement (its own transaction).
const rawInsertOne = `
	INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, grp, dedup_id, attributes, body)
	VALUES ($1, nextval('ferry.message_id_seq'), now(), false, NULL, NULL, NULL, $2::json)`

// rawClaim is Ferry's claim without the dead-letter branch: lock up to $2
// visible messages in claim order, skipping locked ones, and lease them
// for $3 ms, in one statement.
const rawClaim = `
	WITH candidate AS (
		SELECT id FROM ferry.messages
		WHERE queue_id = $1 AND NOT waiting AND visible_at <= now()
		ORDER BY visible_at, id
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	)
	UPDATE ferry.messages m SET
		visible_at = clock_timestamp() + $3 * interval '1 millisecond',
		receive_count = m.receive_count + 1,
		claim_token = (random() * 9007199254740991)::bigint
	FROM candidate c
	WHERE m.queue_id = $1 AND m.id = c.id
	RETURNING m.id, m.body::text, m.attributes::text, m.grp, m.dedup_id, m.claim_token, m.receive_count, m.sent_at`

// rawDelete deletes claimed messages by id (the raw "ack").
const rawDelete = `DELETE FROM ferry.messages WHERE queue_id = $1 AND id = ANY($2)`

// leaseMillis is the visibility timeout of raw claims (Ferry's default).
const leaseMillis = 30_000

// rawClaimIDs claims up to limit messages and returns their ids, reading
// every column a consumer gets.
func rawClaimIDs(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, queueID int64, limit int) ([]int64, error) {
	rows, err := db.Query(ctx, rawClaim, queueID, limit, leaseMillis)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var (
			id           int64
			body         string
			attrs        *string
			grp, dedup   *string
			token        int64
			receiveCount int
			sentAt       time.Time
		)
		if err := rows.Scan(&id, &body, &attrs, &grp, &dedup, &token, &receiveCount, &sentAt); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// bodies returns n copies of the bench body, for rawInsertBatch.
func bodies(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = body
	}
	return s
}

// createQueue creates a queue through the API and returns its id.
func (b *Bench) createQueue(ctx context.Context, name string) (int64, error) {
	if err := b.client.CreateQueue(ctx, name); err != nil {
		return 0, err
	}
	var id int64
	err := b.raw.QueryRow(ctx, `SELECT id FROM ferry.queues WHERE name = $1`, name).Scan(&id)
	return id, err
}

// reset empties the message tables (queues stay) and checkpoints, so the
// next measurement starts from the same state as the previous one.
func (b *Bench) reset(ctx context.Context) error {
	if _, err := b.raw.Exec(ctx, `TRUNCATE ferry.messages, ferry.dedup, ferry.dead_letters, ferry.queue_counts`); err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	return b.checkpoint(ctx)
}

// checkpoint forces a checkpoint, so that none falls inside a measurement
// and every measurement starts with the same full-page-write state.
func (b *Bench) checkpoint(ctx context.Context) error {
	if _, err := b.raw.Exec(ctx, `CHECKPOINT`); err != nil {
		// Not allowed to non-superusers before PostgreSQL 15.
		b.log.Warn("CHECKPOINT failed; measurements may include checkpoints", "error", err)
	}
	return nil
}

// fill inserts n available messages into the queue with bulk INSERT ...
// SELECT generate_series (chunks of 100k, one transaction each), then
// VACUUM ANALYZE and a checkpoint: a settled backlog.
func (b *Bench) fill(ctx context.Context, queueID int64, n int) error {
	started := time.Now()
	const chunk = 100_000
	for done := 0; done < n; done += chunk {
		k := min(chunk, n-done)
		if _, err := b.raw.Exec(ctx, `
			INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, body)
			SELECT $1, nextval('ferry.message_id_seq'), now(), false, $2::json FROM generate_series(1, $3)`,
			queueID, body, k); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	if _, err := b.raw.Exec(ctx, `VACUUM ANALYZE ferry.messages`); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	if err := b.checkpoint(ctx); err != nil {
		return err
	}
	progress("  filled %d messages in %s", n, time.Since(started).Round(100*time.Millisecond))
	return nil
}

// dbPos is where the database's WAL and transaction counter stand.
type dbPos struct{ wal, xid int64 }

// dbPosition reads the WAL insert position (bytes) and the next
// transaction id, neither of which lags like the cumulative statistics do.
func (b *Bench) dbPosition(ctx context.Context) dbPos {
	var p dbPos
	_ = b.raw.QueryRow(ctx, `/* bench:db_position */ SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint,
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&p.wal, &p.xid)
	return p
}

// RelSizes are the on-disk sizes of a table (ferry.messages unless said) and
// its indexes.
type RelSizes struct {
	Heap, Total int64 // heap (main fork) and everything (+ TOAST, FSM, VM, indexes)
	Indexes     []IndexSize
	Live, Dead  int64 // n_live_tup, n_dead_tup
	Autovacuums int64 // autovacuum_count
}

// IndexSize is one index's size.
type IndexSize struct {
	Name  string
	Bytes int64
}

// IndexBytes is the sum of the index sizes.
func (r RelSizes) IndexBytes() int64 {
	var n int64
	for _, i := range r.Indexes {
		n += i.Bytes
	}
	return n
}

// sizes reads the sizes and tuple statistics of ferry.messages. The
// cumulative statistics lag by up to a second or so; callers that need them
// current wait first.
func (b *Bench) sizes(ctx context.Context) (RelSizes, error) { return b.sizesOf(ctx, "ferry.messages") }

// sizesOf is sizes of another table (a schema-qualified name).
func (b *Bench) sizesOf(ctx context.Context, table string) (RelSizes, error) {
	var r RelSizes
	err := b.raw.QueryRow(ctx, `
		SELECT coalesce(sum(pg_relation_size(t.relid)), 0)::bigint, coalesce(sum(pg_total_relation_size(t.relid)), 0)::bigint,
			coalesce(sum(s.n_live_tup), 0)::bigint, coalesce(sum(s.n_dead_tup), 0)::bigint, coalesce(sum(s.autovacuum_count), 0)::bigint
		-- A partitioned table (ferry.messages) has no storage of its own:
		-- the sum of its partitions'; a plain table is its own one leaf.
		FROM `+leavesOf("$1::regclass")+` t LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid`, table).
		Scan(&r.Heap, &r.Total, &r.Live, &r.Dead, &r.Autovacuums)
	if err != nil {
		return r, err
	}
	rows, err := b.raw.Query(ctx, `
		SELECT i.indexrelid::regclass::text,
			(SELECT coalesce(sum(pg_relation_size(p.relid)), 0)::bigint FROM `+leavesOf("i.indexrelid")+` p)
		FROM pg_index i WHERE i.indrelid = $1::regclass ORDER BY 1`, table)
	if err != nil {
		return r, err
	}
	r.Indexes, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (IndexSize, error) {
		var i IndexSize
		err := row.Scan(&i.Name, &i.Bytes)
		i.Name = strings.TrimPrefix(i.Name, "ferry.")
		return i, err
	})
	return r, err
}

// leavesOf is a FROM item of the relations holding rel's storage, in a
// column relid: a partitioned table's (or index's) leaf partitions, or
// rel itself when it is a plain one (pg_partition_tree has no rows for
// a relation that is in no partition tree).
func leavesOf(rel string) string {
	return `(SELECT relid FROM pg_partition_tree(` + rel + `) WHERE isleaf
		UNION ALL SELECT ` + rel + ` WHERE NOT EXISTS (SELECT FROM pg_partition_tree(` + rel + `)))`
}

// warmPool opens n connections of a pool up front, so that connection
// setup is not measured.
func warmPool(ctx context.Context, p *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := p.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}
