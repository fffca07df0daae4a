package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RelayWakeKey is the [Notifier] payload of ferry.publish: its NOTIFY,
// delivered when the caller's transaction commits, tells the relay of
// every instance that there are pending events. It is no queue's, topic's
// or push target's id.
const RelayWakeKey int64 = math.MinInt64 + 2

// relayLockClass is the first key of the relay's advisory locks (the
// two-integer form, apart from the bigint keys of queues and groups);
// the second is the topic's id.
const relayLockClass = 1718772334

// RelayMaxBytes is the default byte budget of one relay transaction
// (RelayConfig.MaxBytes): what its events' ids, types, keys, data and
// attributes add up to as text, as the relay reads them.
const RelayMaxBytes = 8 << 20

// Relay is the built-in outbox relay: it appends the events published
// through the SQL API, once the transactions that published them have
// committed, to their topics' logs, with their deliveries, through the
// engine REST publishes use (publishBatch). Every instance runs one.
//
// ferry.publish records an event in ferry.event_pending with its id,
// partition and a pending dedup claim, and NOTIFYs [RelayWakeKey]; the
// Relay hears it ([Notifier.OnNotify]) and appends what is pending, per
// topic in seq order (a transaction's events in call order), one batch per
// short transaction, of at most MaxEvents events and MaxBytes bytes (so
// its memory is bounded by the budget, not by what an application
// published at once: the rows past the budget are not read): the pending rows are deleted and the events appended
// in the same transaction, so an event is appended once even if a relay
// dies mid-batch (its transaction rolls back, the rows stay for the next)
// or two instances relay at once (a topic's batches are serialized by a
// transaction advisory lock that the other instance does not wait for:
// the holder drains what is committed, and looks again after its commit).
// Events of a topic that is gone are dropped with their claims.
//
// Without a NOTIFY (a lost listener connection; the [Notifier] wakes it on
// reconnecting too) it looks for pending events every FallbackPoll: one
// read, nothing written when there are none (DESIGN.md invariant 12).
type Relay struct {
	pool      *pgxpool.Pool
	published func(topicIDs, subscriptionIDs []int64)
	appended  func(topic string, events int)
	poll      time.Duration
	batch     int
	maxBytes  int64
	log       *slog.Logger
	took      func(events int, bytes int64) // tests: what each batch read
	kick      chan struct{}
	n         *Notifier  // nil: never awake (event_relay_awake.go)
	awake     relayAwake // Run's
	awakeIdle time.Duration
	filters   filterCache
	running   sync.Mutex // one drain at a time in a process
}

// RelayConfig configures [NewRelay].
type RelayConfig struct {
	// Published is called after every commit with the topic that got
	// events and the subscriptions that got deliveries (what Publisher
	// calls it with).
	Published func(topicIDs, subscriptionIDs []int64)
	// Appended is called after every commit that appended events with
	// the topic's name and how many it appended (duplicates excluded),
	// once per event however often a batch was tried (Ferry counts them
	// in ferry_events_published_total).
	Appended func(topic string, events int)
	// FallbackPoll is how often it looks for pending events without a
	// wake (default 30s).
	FallbackPoll time.Duration
	// MaxEvents caps the events of one transaction (default 1000).
	MaxEvents int
	// MaxBytes caps the bytes of one transaction's events (their ids,
	// types, keys, data and attributes as text; default RelayMaxBytes). A
	// batch takes the first event whatever its size.
	MaxBytes int64
	Log      *slog.Logger
}

// NewRelay makes a [Relay] woken by n (set up before n runs); Run runs it.
func NewRelay(pool *pgxpool.Pool, n *Notifier, cfg RelayConfig) *Relay {
	r := &Relay{
		pool: pool, published: cfg.Published, appended: cfg.Appended, poll: cfg.FallbackPoll, batch: cfg.MaxEvents,
		maxBytes: cfg.MaxBytes, log: cfg.Log, kick: make(chan struct{}, 1), n: n,
		awakeIdle: relayAwakeIdle,
	}
	if r.maxBytes <= 0 {
		r.maxBytes = RelayMaxBytes
	}
	if r.poll <= 0 {
		r.poll = 30 * time.Second
	}
	if r.batch <= 0 {
		r.batch = 1000
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if n != nil {
		n.OnNotify(func(ids []int64) {
			if ids == nil || slices.Contains(ids, RelayWakeKey) {
				r.Kick()
			}
		})
	}
	return r
}

// Kick has the [Relay] look for pending events now.
func (r *Relay) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run relays until ctx ends; a batch in progress then still commits.
// While it finds events it stays awake (event_relay_awake.go): it looks
// every relayAwakePoll, and publishes send no NOTIFY.
func (r *Relay) Run(ctx context.Context) {
	backoff := time.Duration(0)
	again := false // the last pass found events: look again at once
	r.Kick()       // what was left pending before this start
	defer r.sleepOnStop()
	for {
		wait := r.poll
		switch {
		case backoff > 0:
			wait = backoff
		case again:
			wait = 0
		case r.awake.pid != 0:
			wait = relayAwakePoll
		}
		timer := time.NewTimer(wait)
		polled := false
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-r.kick:
		case <-timer.C:
			polled = backoff == 0 && !again && r.awake.pid == 0
		}
		timer.Stop()
		if polled && !r.anyPending(ctx) {
			continue
		}
		n, err := r.drainPass(ctx)
		if err != nil && ctx.Err() == nil {
			again = false
			backoff = min(max(2*backoff, 50*time.Millisecond), r.poll)
			r.log.Warn("relay: pending events not appended; retrying", "error", err, "in", backoff)
			continue
		}
		backoff, again = 0, n > 0
		r.stayAwake(ctx, again)
	}
}

// anyPending is the fallback poll's one read.
func (r *Relay) anyPending(ctx context.Context) bool {
	var found bool
	err := r.pool.QueryRow(ctx, `/* ferry:event_pending_any */ SELECT EXISTS (SELECT 1 FROM ferry.event_pending)`).Scan(&found)
	return err != nil || found
}

// Drain appends every committed pending event that no other instance is
// appending, and reports how many it appended. It stops at ctx's end
// between two batches.
func (r *Relay) Drain(ctx context.Context) (int, error) {
	r.running.Lock()
	defer r.running.Unlock()
	total := 0
	for ctx.Err() == nil {
		n, progress, err := r.pass(ctx)
		total += n
		if err != nil || !progress {
			return total, err
		}
	}
	return total, nil
}

// drainPass is one pass of [Relay.Drain]: what Run does between its
// looks at whether to stay awake.
func (r *Relay) drainPass(ctx context.Context) (int, error) {
	r.running.Lock()
	defer r.running.Unlock()
	n, _, err := r.pass(ctx)
	return n, err
}

// pass appends the committed pending events of every topic that has
// some, each until a batch is not full, and reports how many it
// appended and whether it took any topic's batch (a topic another
// instance held is left to it).
func (r *Relay) pass(ctx context.Context) (total int, progress bool, err error) {
	topics, err := r.pendingTopics(ctx)
	if err != nil {
		return 0, false, err
	}
	for _, id := range topics {
		for ctx.Err() == nil {
			b, err := r.relayBatch(id)
			if err != nil {
				return total, progress, err
			}
			total += b.n
			progress = progress || b.done
			if !b.done || !b.more {
				break
			}
		}
	}
	return total, progress, nil
}

// pendingTopics lists the topics with committed pending events: one probe
// of the index per topic.
func (r *Relay) pendingTopics(ctx context.Context) ([]int64, error) {
	rows, err := r.pool.Query(ctx, `/* ferry:event_pending_topics */
		WITH RECURSIVE t AS (
			(SELECT topic_id FROM ferry.event_pending ORDER BY topic_id LIMIT 1)
			UNION ALL
			SELECT (SELECT p.topic_id FROM ferry.event_pending p WHERE p.topic_id > t.topic_id ORDER BY p.topic_id LIMIT 1)
			FROM t WHERE t.topic_id IS NOT NULL
		)
		SELECT topic_id FROM t WHERE topic_id IS NOT NULL`)
	if err != nil {
		return nil, interpretError("relay", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return ids, interpretError("relay", err)
}

// relayBatch appends up to r.batch pending events of the topic, of at
// most r.maxBytes, in one transaction and wakes their readers. A
// transaction that failed through concurrency is run again.
func (r *Relay) relayBatch(topicID int64) (relayed, error) {
	ctx := context.Background() // a batch begun is finished
	var b relayed
	err := retryN(ctx, 10, func() error {
		conn, err := r.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		b, err = r.relayTx(ctx, conn.Conn(), topicID)
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.Background(), "ROLLBACK")
		}
		return err
	})
	if err != nil {
		return relayed{}, interpretError("relay", err)
	}
	if b.n > 0 && r.published != nil {
		r.published([]int64{topicID}, b.out.Subscriptions)
	}
	if b.n > 0 && r.appended != nil {
		r.appended(b.topic, b.n)
	}
	return b, nil
}

// relayed is what one relay transaction did: n events appended to the
// topic named topic (duplicates excluded), with out the publish's outcome;
// done false when another instance held the topic (it appends them);
// more when the topic has pending events past those it took.
type relayed struct {
	n     int
	done  bool
	more  bool
	topic string
	out   PublishOutcome
}

// relayTx is one batch's transaction on conn: the topic's lock, without
// waiting; the topic and its oldest pending events, deleted; and the
// publish of those events (with COMMIT in its last round trip).
func (r *Relay) relayTx(ctx context.Context, conn *pgx.Conn, topicID int64) (relayed, error) {
	var (
		got   bool
		topic *Topic
	)
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`/* ferry:event_relay_lock */ SELECT pg_try_advisory_xact_lock($1, ($2 % 2147483647)::integer)`,
		relayLockClass, topicID).QueryRow(func(row pgx.Row) error { return row.Scan(&got) })
	b.Queue(`/* ferry:event_relay_topic */
		SELECT id, name, partitions, retention_seconds, dedup_window_seconds, coalesce(source, '') FROM ferry.topics WHERE id = $1`,
		topicID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var t Topic
			if err := rows.Scan(&t.ID, &t.Name, &t.Partitions, &t.RetentionSeconds, &t.DedupWindowSeconds, &t.Source); err != nil {
				return err
			}
			topic = &t
		}
		return rows.Err()
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return relayed{}, err
	}
	if !got {
		_, err := conn.Exec(ctx, `ROLLBACK`)
		return relayed{}, err
	}
	events, more, err := r.takePending(ctx, conn, topicID)
	if err != nil || len(events) == 0 {
		if err == nil {
			_, err = conn.Exec(ctx, `COMMIT`)
		}
		return relayed{done: true}, err
	}
	if topic == nil {
		return relayed{done: true, more: more}, r.drop(ctx, conn, topicID, events)
	}
	p := &publishBatch{topic: *topic, filters: &r.filters, relayed: true, ids: make([]string, len(events)), repeatOf: make([]int, len(events)), rows: events}
	for i, e := range events {
		p.ids[i], p.repeatOf[i], p.rows[i].at = e.id, -1, i
	}
	out, err := p.write(ctx, conn, false, true)
	if err != nil {
		return relayed{}, err
	}
	fresh := 0
	for _, res := range out.Results {
		if !res.Duplicate {
			fresh++
		}
	}
	return relayed{n: fresh, done: true, more: more, topic: topic.Name, out: out}, nil
}

// takePending deletes and returns the topic's oldest pending events, in
// seq order: at most r.batch, and no more than fit in r.maxBytes (the
// first whatever its size). more says whether the topic has pending
// events past them.
//
// The rows are walked one at a time by the index, in seq order, each
// converted to text once and measured, until the next would not fit
// (its text is the only one read past the budget); the walked rows are
// then deleted by ctid (a TID scan: no other row is read).
func (r *Relay) takePending(ctx context.Context, conn *pgx.Conn, topicID int64) (events []publishRow, more bool, err error) {
	var bytes int64
	b := &pgx.Batch{}
	// Each step of the walk must find the next row by the index, in its
	// order: any other scan would read the rest of the backlog once per
	// row taken, and the planner picks one (a sequential or bitmap scan
	// and a sort) when its statistics say the topic has few pending rows.
	b.Queue(`/* ferry:event_pending_take_plan */ SET LOCAL enable_seqscan = off`)
	b.Queue(`/* ferry:event_pending_take_plan */ SET LOCAL enable_bitmapscan = off`)
	b.Queue(`/* ferry:event_pending_take */
		WITH RECURSIVE walk AS (
			(SELECT p.*, 1 AS n, p.size AS total FROM (`+fmt.Sprintf(pendingNextSQL, "")+`) p)
			UNION ALL
			SELECT p.*, w.n + 1, w.total + p.size
			FROM walk w CROSS JOIN LATERAL (`+fmt.Sprintf(pendingNextSQL, "AND e.seq > w.seq")+`) p
			WHERE w.n < $2 AND w.total + p.size <= $3
		), taken AS (
			DELETE FROM ferry.event_pending e WHERE e.ctid = ANY (ARRAY(SELECT tid FROM walk)) RETURNING e.seq
		)
		SELECT w.id, w.type, w.key, w.partition, w.data, w.attrs, w.size,
			EXISTS (SELECT 1 FROM ferry.event_pending e WHERE e.topic_id = $1 AND e.seq > (SELECT max(seq) FROM walk))
		FROM walk w JOIN taken USING (seq) ORDER BY w.seq`, topicID, r.batch, r.maxBytes).Query(func(rows pgx.Rows) error {
		var err error
		events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (publishRow, error) {
			var (
				e    publishRow
				size int64
			)
			err := row.Scan(&e.id, &e.typ, &e.key, &e.partition, &e.data, &e.attrs, &size, &more)
			bytes += size
			return e, err
		})
		return err
	})
	b.Queue(`/* ferry:event_pending_take_plan_end */ SET LOCAL enable_seqscan TO DEFAULT`)
	b.Queue(`/* ferry:event_pending_take_plan_end */ SET LOCAL enable_bitmapscan TO DEFAULT`)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, false, err
	}
	if r.took != nil {
		r.took(len(events), bytes)
	}
	return events, more, nil
}

// pendingNextSQL reads the next pending event of topic $1 in seq order
// (its %s is the caller's lower bound on seq, or nothing), with its data and
// attributes as text and its size. The text is made once (OFFSET 0 keeps
// the planner from copying the conversion into each use), and only for
// the one row the limit keeps, whatever plan finds it.
const pendingNextSQL = `
	SELECT nx.seq, nx.tid, nx.id, nx.type, nx.key, nx.partition, t.data, t.attrs,
		octet_length(nx.id) + octet_length(nx.type) + coalesce(octet_length(nx.key), 0)
			+ coalesce(octet_length(t.data), 0) + coalesce(octet_length(t.attrs), 0) AS size
	FROM (
		SELECT e.seq, e.ctid AS tid, e.id, e.type, e.key, e.partition, e.data, e.attributes
		FROM ferry.event_pending e WHERE e.topic_id = $1 %s ORDER BY e.topic_id, e.seq LIMIT 1
	) nx
	CROSS JOIN LATERAL (SELECT nx.data::text AS data, nx.attributes::text AS attrs OFFSET 0) t`

// drop deletes the pending claims of events whose topic is gone (their
// rows are deleted already) and commits.
func (r *Relay) drop(ctx context.Context, conn *pgx.Conn, topicID int64, events []publishRow) error {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.id
	}
	b := &pgx.Batch{}
	b.Queue(`/* ferry:event_dedup_relay_drop */
		DELETE FROM ferry.event_dedup d USING unnest($2::text[]) AS i(id)
		CROSS JOIN LATERAL (
			SELECT x.ctid FROM ferry.event_dedup x WHERE x.topic_id = $1 AND x.event_id = i.id LIMIT 1
		) x
		WHERE d.ctid = x.ctid AND d."offset" = `+pendingOffsetSQL, topicID, ids)
	b.Queue(`COMMIT`)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	r.log.Warn("relay: events of a deleted topic dropped", "topic_id", topicID, "events", len(events))
	return nil
}

// EventAwaitAppended waits, up to wait, until the events of results at
// [PendingOffset] (duplicates of SQL API events the relay has not appended
// yet) are appended, and sets their offsets. Woken by the topic's
// appends ([TopicWakeKey]); [ErrPending] if some are still pending then.
func EventAwaitAppended(ctx context.Context, db DBTX, n *Notifier, t Topic, results []PublishResult, wait, poll time.Duration, stop <-chan struct{}) error {
	var ids []string
	for _, r := range results {
		if r.Offset == PendingOffset {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	offsets := map[string]int64{}
	err := longPoll(ctx, n, TopicWakeKey(t.ID), wait, poll, stop, func() (bool, error) {
		rows, err := db.Query(ctx, `/* ferry:event_dedup_await */
			SELECT d.event_id, d."offset" FROM unnest($2::text[]) AS i(id)
			CROSS JOIN LATERAL (
				SELECT event_id, "offset" FROM ferry.event_dedup WHERE topic_id = $1 AND event_id = i.id LIMIT 1
			) d`, t.ID, ids)
		if err != nil {
			return false, interpretError("event publish", err)
		}
		var (
			id  string
			off int64
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &off}, func() error {
			if off >= 0 {
				offsets[id] = off
			}
			return nil
		})
		return len(offsets) == len(ids), interpretError("event publish", err)
	})
	if err != nil {
		return err
	}
	for i, r := range results {
		if r.Offset == PendingOffset {
			off, ok := offsets[r.ID]
			if !ok {
				return ErrPending
			}
			results[i].Offset = off
		}
	}
	return nil
}

// ErrPending says that an event id is a duplicate of an event published
// through the SQL API that the relay has not appended yet.
var ErrPending = errors.New("the event with this id was published through the SQL API and is not in the log yet")
