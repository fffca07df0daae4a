package store

import (
	"context"
	"errors"
	"fmt"
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
//
// Each transaction is a sendBatch: the same write [MessageSendTx] does in a
// caller's transaction, for every request it holds; the Sender adds only
// the batching, the commit, the retries and the answers.
type Sender struct {
	pool *pgxpool.Pool
	c    *coalescer[*sendRequest]
	// committed is called after each commit with the queues written to.
	committed func(queueIDs []int64)
	queues    *QueueCache
}

// SenderConfig configures [NewSender].
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
	s.c = newCoalescer(cfg.Workers, cfg.MaxMessages, 100, func(r *sendRequest) int { return len(r.msgs) }, s.write)
	return s
}

// Close stops the workers after the requests already taken are written.
func (s *Sender) Close() { s.c.close() }

// Send writes msgs to the named queue and answers one result per message,
// in order, after the commit. It returns [ErrNotFound] for an unknown queue,
// [*QueueFullError] when max_depth would be exceeded and [*ValidationError] for
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
// round trip; two, in an explicit transaction, when a queue has a
// max_depth to check). Requests refused for their own reasons get r.err
// and are left out.
func (s *Sender) writeOnce(ctx context.Context, batch []*sendRequest) ([]int64, error) {
	// A send that waits long for a lock (a queue being purged or deleted, a
	// group held by a slow transaction) would hold up every small send
	// behind it, on every queue: it gives up after sendLockTimeout instead,
	// and only its own requests fail (retried alone, then answered 503).
	b := &sendBatch{lockTimeout: sendLockTimeout}
	err := b.groupByQueue(batch, func(name string) (Queue, error) { return s.queues.Get(ctx, s.pool, name) })
	if err != nil {
		return nil, err
	}
	var (
		db DBTX = s.pool
		tx pgx.Tx
	)
	if b.needsTx() {
		if tx, err = s.pool.Begin(ctx); err != nil {
			return nil, err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		db = tx
	}
	sent, err := b.run(ctx, db)
	if err != nil || !sent {
		return nil, err
	}
	if tx != nil {
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
	}
	// Committed. The requests of a queue deleted since it was cached
	// (perhaps recreated under the same name) are written again by write,
	// once, with a fresh lookup.
	written, stale := b.answer()
	for _, name := range stale {
		s.queues.Forget(name)
	}
	return written, nil
}
