package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// SendTxResult is what [MessageSendTx] wrote.
type SendTxResult struct {
	// Results has one entry per message, in order, as Sender.Send answers.
	Results []SendResult
	// Wake lists the queues to wake once the transaction has committed
	// (Notifier.Published, the pusher's Kick): the queue sent to. It is
	// the caller's to do, after the commit, never before.
	Wake []int64
}

// MessageSendTx writes msgs to queue q in the caller's transaction tx,
// as a REST send does (dedup, groups, delays, max_depth admission); the
// messages exist exactly when tx commits.
//
//   - The caller validates the messages' shape (see [SendMessage]);
//     MessageSendTx checks what depends on the queue's configuration.
//   - A refusal ([*QueueFullError], [*ValidationError], [ErrNotFound])
//     writes nothing and leaves tx usable; a database error aborts tx.
//   - tx holds the queue's, groups' and dedup ids' locks until it ends, so
//     do not keep it open long after; see "Locks" in the package doc.
//   - It wakes no one: after commit, pass Wake to what wakes consumers.
func MessageSendTx(ctx context.Context, tx pgx.Tx, q Queue, msgs []SendMessage) (SendTxResult, error) {
	r := &sendRequest{queue: q.Name, msgs: msgs}
	b := &sendBatch{}
	b.add(q, r)
	if _, err := b.run(ctx, tx); err != nil {
		return SendTxResult{}, interpretError("message send", err)
	}
	written, _ := b.answer()
	switch {
	case errors.Is(r.err, errStaleQueue):
		return SendTxResult{}, fmt.Errorf("message send: queue %q: %w", q.Name, ErrNotFound)
	case r.err != nil:
		return SendTxResult{}, r.err
	}
	return SendTxResult{Results: r.results, Wake: written}, nil
}

// sendBatch is one send transaction: its requests grouped by queue,
// admitted against their queues' max_depth, written in one pipelined
// batch and answered. Its methods are its phases, in order:
// groupByQueue (or add), admit and write (together, run), answer. The
// Sender runs one for each transaction of coalesced requests;
// MessageSendTx runs one of a single request in the caller's transaction.
// A request refused for its own reason gets r.err and is left out; the
// others go on.
type sendBatch struct {
	byQueue map[int64]*queueSend
	// written lists the queues write wrote to, in id order.
	written []int64
	// lockTimeout, if set, bounds the write's wait for any one lock, for
	// the rest of its transaction.
	lockTimeout string
}

// queueSend is one queue's requests in a sendBatch.
type queueSend struct {
	q    Queue
	reqs []*sendRequest
	// plan writes the admitted requests' messages together (set by write).
	plan *sendPlan
}

// groupByQueue looks up each request's queue and adds the request to it.
// A request whose queue does not exist gets ErrNotFound; any other lookup
// error fails the whole batch.
func (b *sendBatch) groupByQueue(reqs []*sendRequest, lookup func(name string) (Queue, error)) error {
	for _, r := range reqs {
		r.results, r.err, r.queueID = nil, nil, 0
		q, err := lookup(r.queue)
		if errors.Is(err, ErrNotFound) {
			r.err = fmt.Errorf("message send: queue %q: %w", r.queue, ErrNotFound)
			continue
		}
		if err != nil {
			return err
		}
		b.add(q, r)
	}
	return nil
}

// add checks r against q's configuration on its own, so that a bad
// request refuses only itself, and adds it to q's requests.
func (b *sendBatch) add(q Queue, r *sendRequest) {
	var err error
	if r.own, err = planSend(q, r.msgs); err != nil {
		r.err = err
		return
	}
	if b.byQueue == nil {
		b.byQueue = map[int64]*queueSend{}
	}
	w := b.byQueue[q.ID]
	if w == nil {
		w = &queueSend{q: q}
		b.byQueue[q.ID] = w
	}
	w.reqs = append(w.reqs, r)
}

// limited lists the queues with a max_depth, in id order.
func (b *sendBatch) limited() []int64 {
	var ids []int64
	for id, w := range b.byQueue {
		if w.q.MaxDepth > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// needsTx reports whether the batch must run in an explicit transaction:
// a queue with a max_depth is admitted and written under its exclusive
// lock, taken before its depth is read. Without one, write's batch is its
// own implicit transaction.
func (b *sendBatch) needsTx() bool { return len(b.limited()) > 0 }

// run is the whole write of the batch on db: admit, then write. db must
// be a transaction if needsTx. It reports false if no request was
// admitted: nothing was sent to write.
func (b *sendBatch) run(ctx context.Context, db DBTX) (bool, error) {
	if err := b.admit(ctx, db); err != nil {
		return false, err
	}
	return b.write(ctx, db)
}

// admit takes the exclusive locks of the queues with a max_depth (in id
// order), reads their depths, and refuses the requests that do not fit
// (admitByDepth), so that concurrent sends, from any instance, cannot
// together pass the limit.
func (b *sendBatch) admit(ctx context.Context, db DBTX) error {
	limited := b.limited()
	if len(limited) == 0 {
		return nil
	}
	dedups := map[int64][]string{}
	for _, id := range limited {
		for _, r := range b.byQueue[id].reqs {
			dedups[id] = append(dedups[id], r.own.dedupIDs()...)
		}
	}
	depths, live, err := queueDepthsLocked(ctx, db, limited, dedups)
	if err != nil {
		return err
	}
	for _, id := range limited {
		w := b.byQueue[id]
		w.reqs = admitByDepth(w.q, w.reqs, depths[id], live[id])
	}
	return nil
}

// write sends the statements of every queue with admitted requests, in
// queue id order (one lock order for every transaction), in one round
// trip. It reports false, sending nothing, if there is none.
func (b *sendBatch) write(ctx context.Context, db DBTX) (bool, error) {
	b.written = b.written[:0]
	for id, w := range b.byQueue {
		if len(w.reqs) > 0 {
			b.written = append(b.written, id)
		}
	}
	if len(b.written) == 0 {
		return false, nil
	}
	slices.Sort(b.written)
	batch := &pgx.Batch{}
	if b.lockTimeout != "" {
		batch.Queue(`/* ferry:message_send_lock_timeout */ SELECT set_config('lock_timeout', $1, true)`, b.lockTimeout)
	}
	for _, id := range b.written {
		w := b.byQueue[id]
		var all []SendMessage
		for _, r := range w.reqs {
			all = append(all, r.msgs...)
		}
		w.plan, _ = planSend(w.q, all) // each request was valid alone
		w.plan.addStatements(batch)
	}
	return true, db.SendBatch(ctx, batch).Close()
}

// answer gives each written request its share of its queue's results,
// once the transaction committed, and lists the queues written to. The
// requests of a queue deleted since it was looked up (perhaps recreated
// under the same name) get errStaleQueue instead; stale names those
// queues.
func (b *sendBatch) answer() (written []int64, stale []string) {
	written = make([]int64, 0, len(b.written))
	for _, id := range b.written {
		w := b.byQueue[id]
		if !w.plan.finish() {
			stale = append(stale, w.q.Name)
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
	return written, stale
}

// errStaleQueue marks a request whose cached queue no longer exists.
var errStaleQueue = errors.New("queue changed since it was cached")

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
// ids are live (within their window), in one round trip; db must be a
// transaction. The live dedup rows are locked (FOR KEY SHARE) so that the
// dedup sweep cannot remove one before this transaction's INSERT finds
// it: a message counted as a duplicate is never written. The statements
// are the SQL API's admission too (store/definitions,
// ferry.message_send_depth_lock and ferry.message_send_dedup_live).
func queueDepthsLocked(ctx context.Context, db DBTX, ids []int64, dedups map[int64][]string) (map[int64]int64, map[int64]map[string]bool, error) {
	b := &pgx.Batch{}
	depths := make(map[int64]int64, len(ids))
	b.Queue(`/* ferry:message_send_depth_lock_call */ SELECT queue_id, depth FROM ferry.message_send_depth_lock($1)`, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id, d int64
			if err := rows.Scan(&id, &d); err != nil {
				return err
			}
			depths[id] = d
		}
		return rows.Err()
	})
	live := make(map[int64]map[string]bool)
	for _, id := range ids {
		if len(dedups[id]) == 0 {
			continue
		}
		b.Queue(`/* ferry:dedup_live_call */ SELECT d FROM ferry.message_send_dedup_live($1, $2) AS d`, id, dedups[id]).Query(func(rows pgx.Rows) error {
			ds, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			live[id] = make(map[string]bool, len(ds))
			for _, d := range ds {
				live[id][d] = true
			}
			return nil
		})
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, interpretError("queue depth", err)
	}
	return depths, live, nil
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
