package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A backfill delivers to a subscription the retained events of its topic
// from a start on (on creation with a start, and on a seek), filtered, in
// publish order. It works in windows: each statement reads at most
// backfillWindow events (a share of it from each partition it is still
// reading), so none does work beyond its window whatever the log holds,
// and each runs under a statement timeout. A window that times out is
// rolled back and done again in halves, down to one event of each
// partition still read, so a slow window never loses events and never
// holds a connection long; only if that cannot be delivered within the
// timeout does the backfill stop, with ErrBackfillStopped.
//
// An ordered subscription is backfilled in the transaction that holds the
// topic's partition locks, every window in publish order across the
// partitions, so each key's events are delivered in order before any later
// one. An unordered one is backfilled after its creation (or its seek's
// fence) committed, partition by partition, each window its own
// transaction, while publishes go on. Deliveries are not unique by event
// position in an index (ferry.messages is partitioned): a window probes
// for the ones the subscription holds and skips them, under the
// subscription queue's lock (see batches), so a window done twice doubles
// nothing.

// backfillWindow bounds the events one backfill statement reads.
const backfillWindow = 5000

// backfillStatementTimeout bounds one backfill statement.
const backfillStatementTimeout = 5 * time.Second

// ErrBackfillStopped means a backfill could not finish: its smallest
// window (one event of each partition still read) took longer than the
// statement timeout. An ordered one
// (in the creation's or seek's transaction) changed nothing; an
// unordered one keeps what it delivered (a prefix of each partition's
// past), and a seek to the same start completes it.
var ErrBackfillStopped = fmt.Errorf("%w: the backfill stopped before it finished", ErrBusy)

// backfillRange is what a backfill has left of one partition: offsets
// [from, to).
type backfillRange struct {
	partition int
	from, to  int64
}

// backfill is one backfill of sub in progress.
type backfill struct {
	sub       Subscription
	timeout   time.Duration // of each statement
	window    int           // events the next statement may read
	maxWindow int           // what window grows back to
}

func newBackfill(s Subscription) *backfill {
	return &backfill{sub: s, timeout: backfillStatementTimeout, window: backfillWindow, maxWindow: backfillWindow}
}

// ranges is, per partition, the offsets from start up to heads (the first
// offset not to backfill).
func (b *backfill) ranges(ctx context.Context, db DBTX, start StartPosition, heads map[int]int64) ([]backfillRange, error) {
	parts := make([]int32, 0, len(heads))
	tos := make([]int64, 0, len(heads))
	for p, h := range heads {
		parts, tos = append(parts, int32(p)), append(tos, h)
	}
	var from time.Time // Earliest: every retained event
	if start.Time != nil {
		from = *start.Time
	}
	rows, err := db.Query(ctx, `/* ferry:subscription_backfill_start */
		SELECT h.partition, coalesce(f."offset", h.head), h.head
		FROM unnest($2::int[], $3::bigint[]) AS h(partition, head)
		LEFT JOIN LATERAL (
			SELECT "offset" FROM ferry.events
			WHERE topic_id = $1 AND partition = h.partition AND published_at >= $4
			ORDER BY published_at, "offset" LIMIT 1
		) f ON true
		ORDER BY h.partition`, b.sub.TopicID, parts, tos, from)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (backfillRange, error) {
		var r backfillRange
		return r, row.Scan(&r.partition, &r.from, &r.to)
	})
}

// locked backfills the ranges in tx (which holds the topic's partition
// locks), window after window in publish order across the partitions,
// each window under a savepoint and the statement timeout.
func (b *backfill) locked(ctx context.Context, tx pgx.Tx, ranges []backfillRange) (int64, error) {
	var prev string
	if err := tx.QueryRow(ctx, `SHOW statement_timeout`).Scan(&prev); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`, b.timeoutSetting()); err != nil {
		return 0, err
	}
	if err := ringProbes(ctx, tx); err != nil {
		return 0, err
	}
	n, err := b.run(ctx, ranges, func(step func(DBTX) error) error {
		return pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return step(sp) })
	})
	if err != nil {
		return n, err
	}
	_, err = tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`, prev)
	return n, err
}

// batches backfills the ranges one partition after the other, each window
// its own transaction under the statement timeout and the subscription
// queue's lock, exclusive: a window probes for the deliveries it would
// duplicate before it inserts, and ferry.messages is partitioned (no
// unique index by event position), so two writers of the same
// subscription's past (this backfill and a seek or redrive of the
// subscription, which take the same lock) must not probe at once. A seek's
// own backfill runs on the connection that holds the lock for the session,
// which lets its windows' locks through. Publishes take no queue lock:
// they deliver only events after the heads the backfill stops at.
func (b *backfill) batches(ctx context.Context, db TxBeginner, ranges []backfillRange) (int64, error) {
	var total int64
	for _, r := range ranges {
		n, err := b.run(ctx, []backfillRange{r}, func(step func(DBTX) error) error {
			return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `/* ferry:subscription_backfill_queue_lock */ SELECT pg_advisory_xact_lock(ferry.queue_lock_key($1))`, b.sub.ID); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`, b.timeoutSetting()); err != nil {
					return err
				}
				if err := ringProbes(ctx, tx); err != nil {
					return err
				}
				return step(tx)
			})
		})
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (b *backfill) timeoutSetting() string { return fmt.Sprint(b.timeout.Milliseconds()) }

// run does windows until the ranges are done, each through atomically
// (which commits or rolls back what the step did). A window that timed
// out is done again with half the events; after a window that went
// through the next may be twice as large again.
func (b *backfill) run(ctx context.Context, ranges []backfillRange, atomically func(step func(DBTX) error) error) (int64, error) {
	var total int64
	for {
		active := slices.DeleteFunc(slices.Clone(ranges), func(r backfillRange) bool { return r.from >= r.to })
		if len(active) == 0 {
			return total, nil
		}
		var (
			next []backfillRange
			n    int64
		)
		err := atomically(func(db DBTX) error {
			var err error
			next, n, err = b.step(ctx, db, active, max(1, b.window/len(active)))
			return err
		})
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			ranges, total = next, total+n
			b.window = min(b.window*2, b.maxWindow)
		case errors.As(err, &pgErr) && pgErr.Code == "57014" && ctx.Err() == nil: // query_canceled: the timeout
			if b.window == 1 {
				return total, ErrBackfillStopped
			}
			b.window /= 2
		default:
			return total, err
		}
	}
}

// step delivers the next window of events of the ranges: up to
// perPartition events of each, in publish order, and of those only the
// ones before the first event (in publish order) that a partition which
// gave its whole share did not return, so that what a step delivers is
// the publish-order prefix of what is left. It returns the ranges left
// and how many deliveries it made. Events the subscription already holds
// (by position) are skipped.
//
// It reads the window's positions and types first and matches the types
// in Go (Filter.matchType, as a publish does), then delivers the matching
// positions whose attributes and data the filter selects (sqlMatch).
func (b *backfill) step(ctx context.Context, db DBTX, ranges []backfillRange, perPartition int) ([]backfillRange, int64, error) {
	w, err := b.read(ctx, db, ranges, perPartition)
	if err != nil {
		return nil, 0, err
	}
	var matched []windowEvent
	for _, e := range w.events {
		if b.sub.Filter.matchType(e.typ) {
			matched = append(matched, e)
		}
	}
	n, err := b.deliver(ctx, db, matched)
	if err != nil {
		return nil, 0, err
	}
	next := slices.Clone(ranges)
	for i, r := range next {
		pr, ok := w.progress[r.partition]
		switch {
		case !ok, pr.read < int64(perPartition) && pr.kept == pr.read:
			next[i].from = r.to // nothing left before the head
		case pr.kept > 0:
			next[i].from = pr.last + 1
		}
	}
	return next, n, nil
}

// windowEvents is the events a window kept, and per partition how many
// events it read, how many it kept and the last kept.
type windowEvents struct {
	events   []windowEvent
	progress map[int]windowProgress
}

type windowEvent struct {
	ctid      pgtype.TID
	partition int
	offset    int64
	typ       string
}

type windowProgress struct {
	read, kept, last int64
}

// read reads the positions and types of a step's window (see step).
func (b *backfill) read(ctx context.Context, db DBTX, ranges []backfillRange, perPartition int) (windowEvents, error) {
	parts := make([]int32, len(ranges))
	froms := make([]int64, len(ranges))
	tos := make([]int64, len(ranges))
	for i, r := range ranges {
		parts[i], froms[i], tos[i] = int32(r.partition), r.from, r.to
	}
	// Rows with a NULL type count a partition's events read; the others
	// are the events kept.
	rows, err := db.Query(ctx, `/* ferry:subscription_backfill_window */
		WITH cand AS MATERIALIZED (
			SELECT e.ctid, e.partition, e."offset", e.published_at, e.type
			FROM unnest($2::int[], $3::bigint[], $4::bigint[]) AS w(partition, from_off, to_off)
			CROSS JOIN LATERAL (
				SELECT ctid, partition, "offset", published_at, type FROM ferry.events e
				WHERE e.topic_id = $1 AND e.partition = w.partition AND e."offset" >= w.from_off AND e."offset" < w.to_off
				ORDER BY e."offset" LIMIT $5
			) e
		),
		counts AS (SELECT partition, count(*) AS n, max("offset") AS last FROM cand GROUP BY partition),
		bound AS (
			SELECT c.published_at, c.partition, c."offset"
			FROM cand c JOIN counts n ON n.partition = c.partition AND n.last = c."offset"
			WHERE n.n = $5 ORDER BY 1, 2, 3 LIMIT 1
		)
		SELECT NULL::tid, partition, n, NULL::text FROM counts
		UNION ALL
		SELECT c.ctid, c.partition, c."offset", c.type FROM cand c
		WHERE NOT EXISTS (
			SELECT 1 FROM bound b WHERE (c.published_at, c.partition, c."offset") > (b.published_at, b.partition, b."offset"))`,
		b.sub.TopicID, parts, froms, tos, perPartition)
	if err != nil {
		return windowEvents{}, err
	}
	defer rows.Close()
	w := windowEvents{progress: map[int]windowProgress{}}
	for rows.Next() {
		var (
			tid pgtype.TID
			p   int
			n   int64
			typ *string
		)
		if err := rows.Scan(&tid, &p, &n, &typ); err != nil {
			return windowEvents{}, err
		}
		pr := w.progress[p]
		if typ == nil {
			pr.read = n
		} else {
			w.events = append(w.events, windowEvent{ctid: tid, partition: p, offset: n, typ: *typ})
			pr.kept++
			pr.last = max(pr.last, n)
		}
		w.progress[p] = pr
	}
	return w, rows.Err()
}

// deliver delivers to the subscription the given events (read by the
// window) that its attributes and data filter selects, in publish order,
// and reports how many deliveries it made. ErrNotFound: the subscription
// was deleted meanwhile.
func (b *backfill) deliver(ctx context.Context, db DBTX, events []windowEvent) (int64, error) {
	tids := make([]pgtype.TID, len(events))
	parts := make([]int32, len(events))
	offs := make([]int64, len(events))
	for i, e := range events {
		tids[i], parts[i], offs[i] = e.ctid, int32(e.partition), e.offset
	}
	var (
		n      int64
		exists bool
	)
	err := db.QueryRow(ctx, `/* ferry:subscription_backfill */
		WITH
		-- The subscription as it is now (its row kept from being deleted
		-- meanwhile: a deleted one gets nothing).
		q AS MATERIALIZED (SELECT filter, ordered FROM ferry.queues WHERE id = $1 FOR KEY SHARE),
		picked AS MATERIALIZED (
			SELECT nextval('ferry.message_id_seq') AS mid, m.* FROM (
				SELECT e.*, CASE WHEN q.ordered THEN e.key END AS grp
				FROM unnest($3::tid[], $4::int[], $5::bigint[]) AS w(t, partition, off)
				CROSS JOIN q
				-- Each event by the ctid the window read (one TID fetch: by
				-- its key the planner may take the time index, which holds
				-- the offset but not first), checked to be still that event
				-- (outside the LIMIT, so that the check is no access path).
				CROSS JOIN LATERAL (SELECT * FROM ferry.events e WHERE e.ctid = w.t LIMIT 1) e
				-- One probe per event by its whole position: as a NOT
				-- EXISTS, the planner may walk the partition's deliveries.
				LEFT JOIN LATERAL (
					SELECT true AS held FROM ferry.messages x
					WHERE x.queue_id = $1 AND x.event_partition = e.partition AND x.event_offset = e."offset" LIMIT 1
				) h ON true
				WHERE e.topic_id = $2 AND e.partition = w.partition AND e."offset" = w.off
					AND h.held IS NULL AND `+sqlMatch()+`
				ORDER BY e.published_at, e.partition, e."offset"
			) m
		),
		delivered AS (
			INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, sent_at, grp, event_id, event_partition, event_offset, body)
			-- Visible since its publish: claims take them in publish order,
			-- whatever order the windows ran in.
			SELECT $1, p.mid, p.published_at,
				p.grp IS NOT NULL AND (row_number() OVER (PARTITION BY p.grp ORDER BY p.mid) > 1 OR g.live IS NOT NULL),
				p.published_at, p.grp, p.id, p.partition, p."offset",
				(ferry.event_json(p.id, p.type, p.key, p.data, p.attributes, p.partition, p."offset", p.published_at)::jsonb
					|| `+ceBodySQL("p.ce", "p.published_at", "tp.source")+`)::json
			FROM picked p
			CROSS JOIN (SELECT coalesce(source, '/ferry/topics/' || name) AS source FROM ferry.topics WHERE id = $2) tp
			LEFT JOIN LATERAL (
				SELECT true AS live FROM ferry.messages x WHERE x.queue_id = $1 AND x.grp = p.grp LIMIT 1
			) g ON true
			ON CONFLICT DO NOTHING
			RETURNING 1
		)
		SELECT (SELECT count(*) FROM delivered), EXISTS (SELECT 1 FROM q)`,
		b.sub.ID, b.sub.TopicID, tids, parts, offs).Scan(&n, &exists)
	if err != nil {
		return 0, err
	}
	if !exists {
		return 0, ErrNotFound // deleted meanwhile
	}
	return n, nil
}

// partitionHeads reads each partition's next offset (under the partition
// locks, so that exactly the events before them are the past).
func partitionHeads(ctx context.Context, tx pgx.Tx, topicID int64) (map[int]int64, error) {
	rows, err := tx.Query(ctx, `/* ferry:topic_heads */ SELECT p.partition, `+partitionNextSQL("p")+` FROM ferry.topic_partitions p WHERE p.topic_id = $1`, topicID)
	if err != nil {
		return nil, err
	}
	heads := map[int]int64{}
	for rows.Next() {
		var (
			p int
			n int64
		)
		if err := rows.Scan(&p, &n); err != nil {
			rows.Close()
			return nil, err
		}
		heads[p] = n
	}
	return heads, rows.Err()
}

// subscriptionBackfillBatches backfills an unordered subscription with the
// retained events from start up to the fence (partition → first offset
// not to backfill), in windows, each its own transaction (see backfill).
// If it stops half way (an error, a crash), the subscription has part of
// the past: a seek to the same start completes it.
func subscriptionBackfillBatches(ctx context.Context, db TxBeginner, s Subscription, start StartPosition, fence map[int]int64) (int64, error) {
	b := newBackfill(s)
	ranges, err := b.ranges(ctx, db, start, fence)
	if err != nil {
		return 0, err
	}
	return b.batches(ctx, db, ranges)
}

// subscriptionBackfillLocked delivers to s the retained events of its
// topic from start on that its filter selects, in publish order (so an
// ordered subscription gets each key's events in offset order), skipping
// events it already holds. It runs in tx, under the topic's partition
// locks (lockTopicForSubscriptions): no publish interleaves, so
// backfilled events come before every later one, at the cost of windows
// over the retained events from start while publishes wait.
func subscriptionBackfillLocked(ctx context.Context, tx pgx.Tx, s Subscription, start StartPosition) (int64, error) {
	if !start.Earliest && start.Time == nil {
		return 0, nil
	}
	heads, err := partitionHeads(ctx, tx, s.TopicID)
	if err != nil {
		return 0, err
	}
	b := newBackfill(s)
	ranges, err := b.ranges(ctx, tx, start, heads)
	if err != nil {
		return 0, err
	}
	return b.locked(ctx, tx, ranges)
}
