package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sender writes send requests with group commit: requests that arrive
// while a transaction is in progress are gathered and written together in
// the next one, so concurrent single-message sends share transactions (and
// fsyncs) instead of paying one each. Every request is answered only after
// the transaction holding it committed.
//
// Small transactions (under 100 messages) run one at a time: while one
// commits, the next gathers everything that arrives, so 32 concurrent
// single sends share a commit instead of spreading over the workers. Larger
// transactions run in parallel, up to the number of workers. A request is
// never split across transactions; a request refused for its own reason
// (unknown queue, queue full, invalid delay) does not affect the others in
// its transaction.
type Sender struct {
	pool *pgxpool.Pool
	c    *coalescer[*sendRequest]
	// committed is called after each commit with the queues written to.
	committed func(queueIDs []int64)
	queues    *QueueCache
}

type sendRequest struct {
	ctx     context.Context
	queue   string
	msgs    []SendMessage
	results []SendResult
	queueID int64
	err     error
	done    chan struct{}
	retried bool // already written again after a stale cache entry
	// own is the request's plan on its own: which of its messages are
	// written (not repeats of an earlier one of the request).
	own *sendPlan
}

// SenderConfig configures NewSender.
type SenderConfig struct {
	// Workers is the number of transactions in progress at once (default 4).
	Workers int
	// MaxMessages caps the messages of one transaction (default 2000).
	MaxMessages int
	// Committed, if set, is called after every commit with the ids of the
	// queues that got messages (used to wake long polls).
	Committed func(queueIDs []int64)
	// Queues caches queue configurations (shared with the handlers, so a
	// PUT on this instance is seen at once). Nil makes a private cache.
	Queues *QueueCache
}

// NewSender starts a Sender's workers; Close stops them.
func NewSender(pool *pgxpool.Pool, cfg SenderConfig) *Sender {
	s := &Sender{pool: pool, committed: cfg.Committed, queues: cfg.Queues}
	if s.queues == nil {
		s.queues = NewQueueCache(time.Second)
	}
	maxMessages := cfg.MaxMessages
	if maxMessages <= 0 {
		maxMessages = 2000
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = 4
	}
	s.c = newCoalescer(workers, maxMessages, 100, func(r *sendRequest) int { return len(r.msgs) }, s.write)
	return s
}

// Close stops the workers after the requests already taken are written.
func (s *Sender) Close() { s.c.close() }

// Send writes msgs to the named queue and answers one result per message,
// in order, after the commit. It returns ErrNotFound for an unknown queue,
// *QueueFullError when max_depth would be exceeded and *ValidationError for
// input the queue's configuration refuses; in each case nothing is written.
func (s *Sender) Send(ctx context.Context, queue string, msgs []SendMessage) ([]SendResult, int64, error) {
	req := &sendRequest{ctx: ctx, queue: queue, msgs: msgs, done: make(chan struct{})}
	if err := s.c.submit(ctx, req); err != nil {
		return nil, 0, fmt.Errorf("message send: %w", err)
	}
	// Once taken, a request is always answered: the caller must not give
	// up on a write that may commit.
	<-req.done
	return req.results, req.queueID, req.err
}

// write runs one transaction for batch and answers every request in it. If
// the database refused the transaction, each request is retried on its
// own, so one request's failure cannot fail the others. If the connection
// was lost or could not be made (the outcome may be unknown, and a retry
// would meet the same outage), nothing is written again: every request
// gets ErrUnavailable at once (see retryEachAlone).
func (s *Sender) write(batch []*sendRequest) {
	// Requests whose client already left are dropped before writing.
	live := batch[:0]
	for _, r := range batch {
		if r.ctx.Err() != nil {
			r.err = r.ctx.Err()
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	queueIDs, err := s.writeTx(live)
	if err != nil && len(live) > 1 && retryEachAlone(err) {
		for _, r := range live {
			s.write([]*sendRequest{r})
		}
		return
	}
	// Wake long polls before answering: the sooner the better.
	if err == nil && len(queueIDs) > 0 && s.committed != nil {
		s.committed(queueIDs)
	}
	for _, r := range live {
		if err != nil {
			r.err, r.results = interpretError("message send", err), nil
		}
		if errors.Is(r.err, errStaleQueue) {
			if r.retried {
				r.err = fmt.Errorf("message send: queue %q: %w", r.queue, ErrNotFound)
			} else {
				r.retried = true
				s.write([]*sendRequest{r})
				continue
			}
		}
		close(r.done)
	}
}

func (s *Sender) writeTx(batch []*sendRequest) ([]int64, error) {
	ctx := context.Background() // a taken request is written to the end
	var written []int64
	err := retry(ctx, func() error {
		var err error
		written, err = s.writeOnce(ctx, batch)
		return err
	})
	return written, err
}

// writeOnce writes batch in one implicit transaction (one pipelined
// round trip; two when a queue has a max_depth to check). Requests refused
// for their own reasons get r.err and are left out.
func (s *Sender) writeOnce(ctx context.Context, batch []*sendRequest) ([]int64, error) {
	type queueWrite struct {
		q    Queue
		reqs []*sendRequest
		plan *sendPlan
	}
	byQueue := map[int64]*queueWrite{}
	var limited []int64
	for _, r := range batch {
		r.results, r.err, r.queueID = nil, nil, 0
		q, err := s.queues.Get(ctx, s.pool, r.queue)
		if errors.Is(err, ErrNotFound) {
			r.err = fmt.Errorf("message send: queue %q: %w", r.queue, ErrNotFound)
			continue
		}
		if err != nil {
			return nil, err
		}
		// Each request is checked on its own, so a bad one refuses only
		// itself.
		if r.own, err = planSend(q, r.msgs); err != nil {
			r.err = err
			continue
		}
		w := byQueue[q.ID]
		if w == nil {
			w = &queueWrite{q: q}
			byQueue[q.ID] = w
			if q.MaxDepth > 0 {
				limited = append(limited, q.ID)
			}
		}
		w.reqs = append(w.reqs, r)
	}
	// A queue with a max_depth is written under its exclusive lock, taken
	// before its depth is read, so concurrent sends (from any instance)
	// cannot together pass the limit. That needs an explicit transaction;
	// without a limit, the batch below is its own implicit transaction.
	var (
		db DBTX = s.pool
		tx pgx.Tx
	)
	if len(limited) > 0 {
		var err error
		if tx, err = s.pool.Begin(ctx); err != nil {
			return nil, err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		db = tx
		slices.Sort(limited)
		dedups := map[int64][]string{}
		for _, id := range limited {
			for _, r := range byQueue[id].reqs {
				dedups[id] = append(dedups[id], r.own.dedupIDs()...)
			}
		}
		depths, live, err := queueDepthsLocked(ctx, tx, limited, dedups)
		if err != nil {
			return nil, err
		}
		for _, id := range limited {
			w := byQueue[id]
			w.reqs = admitByDepth(w.q, w.reqs, depths[id], live[id])
		}
	}
	// Queues in id order: one lock order for every transaction.
	ids := make([]int64, 0, len(byQueue))
	for id, w := range byQueue {
		if len(w.reqs) > 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids)
	b := &pgx.Batch{}
	// A send that waits long for a lock (a queue being purged or deleted, a
	// group held by a slow transaction) would hold up every small send
	// behind it, on every queue: it gives up after sendLockTimeout instead,
	// and only its own requests fail (retried alone, then answered 503).
	b.Queue(`SELECT set_config('lock_timeout', $1, true)`, sendLockTimeout)
	for _, id := range ids {
		w := byQueue[id]
		var all []SendMessage
		for _, r := range w.reqs {
			all = append(all, r.msgs...)
		}
		w.plan, _ = planSend(w.q, all) // each request was valid alone
		w.plan.queue(b)
	}
	br := db.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	var gone []int64 // queues deleted since they were cached
	for _, id := range ids {
		if err := byQueue[id].plan.read(br); errors.Is(err, ErrNotFound) {
			gone = append(gone, id)
		} else if err != nil {
			br.Close()
			return nil, err
		}
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	if tx != nil {
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
	}
	// Committed. Answer each request with its share of the results.
	written := make([]int64, 0, len(ids))
	for _, id := range ids {
		w := byQueue[id]
		if slices.Contains(gone, id) {
			// The cached queue was deleted (perhaps recreated under the
			// same name): write calls these requests again, once, with a
			// fresh lookup.
			s.queues.Forget(w.q.Name)
			for _, r := range w.reqs {
				r.err = errStaleQueue
			}
			continue
		}
		results := w.plan.results
		for _, r := range w.reqs {
			r.queueID = id
			r.results, results = results[:len(r.msgs)], results[len(r.msgs):]
		}
		written = append(written, id)
	}
	return written, nil
}

// errStaleQueue marks a request whose cached queue no longer exists.
var errStaleQueue = errors.New("queue changed since it was cached")

// sendLockTimeout bounds a send transaction's wait for any one lock.
const sendLockTimeout = "5s"

// admitByDepth returns the requests (of one queue with a max_depth, whose
// depth is depth) that fit, in order, and refuses the others: a request
// with more new messages than max_depth can never fit (a
// *ValidationError), one that does not fit now gets *QueueFullError. Only
// new messages take room: a repeat of a dedup id that is live (in live)
// or written by a request admitted before it is a duplicate.
func admitByDepth(q Queue, reqs []*sendRequest, depth int64, live map[string]bool) []*sendRequest {
	admitted := reqs[:0]
	taken := map[string]bool{} // dedup ids of admitted requests
	for _, r := range reqs {
		var fresh int64
		for _, i := range r.own.sent {
			if d := r.msgs[i].DedupID; d == "" || (!live[d] && !taken[d]) {
				fresh++
			}
		}
		switch {
		case fresh > q.MaxDepth:
			r.err = &ValidationError{Field: "messages", Message: fmt.Sprintf(
				"the batch has %d new messages, more than the queue's max_depth of %d: it can never fit", fresh, q.MaxDepth)}
			continue
		case fresh > 0 && depth+fresh > q.MaxDepth:
			// Only new messages take room: a batch of duplicates is
			// answered even when the queue is over its max_depth (it
			// was lowered, or a redrive went past it).
			r.err = &QueueFullError{Depth: depth, MaxDepth: q.MaxDepth}
			continue
		}
		depth += fresh
		for _, d := range r.own.dedupIDs() {
			taken[d] = true
		}
		admitted = append(admitted, r)
	}
	return admitted
}

// queueDepthsLocked takes the exclusive locks of the given queues (in the
// given order) and then reads their depths and which of the given dedup
// ids are live (within their window), in one round trip. The live dedup
// rows are locked (FOR KEY SHARE) so that the dedup sweep cannot remove
// one before this transaction's INSERT finds it: a message counted as a
// duplicate is never written.
func queueDepthsLocked(ctx context.Context, tx pgx.Tx, ids []int64, dedups map[int64][]string) (map[int64]int64, map[int64]map[string]bool, error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT count(pg_advisory_xact_lock(ferry.queue_lock_key(id))) FROM unnest($1::bigint[]) AS t(id)`, ids)
	b.Queue(`/* ferry:queue_depth */
		SELECT q.id, c.depth FROM unnest($1::bigint[]) AS q(id)
		CROSS JOIN LATERAL (
			SELECT sum(messages)::bigint AS depth FROM ferry.queue_counts WHERE queue_id = q.id
		) c`, ids)
	var withDedup []int64
	for _, id := range ids {
		if len(dedups[id]) > 0 {
			withDedup = append(withDedup, id)
			b.Queue(`/* ferry:dedup_live */
				SELECT d.dedup_id FROM unnest($2::text[]) AS r(dedup_id)
				CROSS JOIN LATERAL (
					SELECT x.dedup_id FROM ferry.dedup x
					WHERE x.queue_id = $1 AND x.dedup_id = r.dedup_id AND x.expires_at > now()
					LIMIT 1
					FOR KEY SHARE
				) d`, id, dedups[id])
		}
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, nil, interpretError("queue depth", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, interpretError("queue depth", err)
	}
	depths := make(map[int64]int64, len(ids))
	for rows.Next() {
		var (
			id int64
			d  *int64
		)
		if err := rows.Scan(&id, &d); err != nil {
			rows.Close()
			return nil, nil, interpretError("queue depth", err)
		}
		if d != nil {
			depths[id] = *d
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, interpretError("queue depth", err)
	}
	live := make(map[int64]map[string]bool, len(withDedup))
	for _, id := range withDedup {
		found, err := br.Query()
		if err != nil {
			return nil, nil, interpretError("queue depth", err)
		}
		ds, err := pgx.CollectRows(found, pgx.RowTo[string])
		if err != nil {
			return nil, nil, interpretError("queue depth", err)
		}
		live[id] = make(map[string]bool, len(ds))
		for _, d := range ds {
			live[id][d] = true
		}
	}
	return depths, live, nil
}
