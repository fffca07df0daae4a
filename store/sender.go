package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sender writes send requests with group commit: requests that arrive
// while a transaction is in progress are gathered and written together in
// the next one, so concurrent single-message sends share transactions (and
// fsyncs) instead of paying one each. Every request is answered only after
// the transaction holding it committed.
//
// A few workers run at once so that one transaction is being gathered while
// another commits. A request is never split across transactions; a request
// refused for its own reason (unknown queue, queue full, invalid delay)
// does not affect the others in its transaction.
type Sender struct {
	pool     *pgxpool.Pool
	requests chan *sendRequest
	// maxMessages caps the messages gathered into one transaction.
	maxMessages int
	// committed is called after each commit with the queues written to.
	committed func(queueIDs []int64)
	wg        sync.WaitGroup
	stop      chan struct{}
}

type sendRequest struct {
	ctx     context.Context
	queue   string
	msgs    []SendMessage
	results []SendResult
	queueID int64
	err     error
	done    chan struct{}
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
}

// NewSender starts a Sender's workers; Close stops them.
func NewSender(pool *pgxpool.Pool, cfg SenderConfig) *Sender {
	s := &Sender{
		pool:        pool,
		requests:    make(chan *sendRequest, 1024),
		maxMessages: cfg.MaxMessages,
		committed:   cfg.Committed,
		stop:        make(chan struct{}),
	}
	if s.maxMessages <= 0 {
		s.maxMessages = 2000
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = 4
	}
	for range workers {
		s.wg.Add(1)
		go s.work()
	}
	return s
}

// Close stops the workers after the requests already taken are written.
func (s *Sender) Close() {
	close(s.stop)
	s.wg.Wait()
}

// Send writes msgs to the named queue and answers one result per message,
// in order, after the commit. It returns ErrNotFound for an unknown queue,
// *QueueFullError when max_depth would be exceeded and *ValidationError for
// input the queue's configuration refuses; in each case nothing is written.
func (s *Sender) Send(ctx context.Context, queue string, msgs []SendMessage) ([]SendResult, int64, error) {
	req := &sendRequest{ctx: ctx, queue: queue, msgs: msgs, done: make(chan struct{})}
	select {
	case s.requests <- req:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-s.stop:
		return nil, 0, errors.New("message send: server is shutting down")
	}
	// Once taken, a request is always answered: the caller must not give
	// up on a write that may commit.
	<-req.done
	return req.results, req.queueID, req.err
}

func (s *Sender) work() {
	defer s.wg.Done()
	for {
		var first *sendRequest
		select {
		case first = <-s.requests:
		case <-s.stop:
			// Answer whatever was queued before the stop.
			for {
				select {
				case r := <-s.requests:
					s.write([]*sendRequest{r})
				default:
					return
				}
			}
		}
		batch := []*sendRequest{first}
		n := len(first.msgs)
	gather:
		for n < s.maxMessages {
			select {
			case r := <-s.requests:
				batch = append(batch, r)
				n += len(r.msgs)
			default:
				break gather
			}
		}
		s.write(batch)
	}
}

// write runs one transaction for batch and answers every request in it. If
// the transaction fails as a whole, each request is retried on its own, so
// one request's failure cannot fail the others.
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
	if err != nil && len(live) > 1 {
		for _, r := range live {
			s.write([]*sendRequest{r})
		}
		return
	}
	for _, r := range live {
		if err != nil {
			r.err, r.results = err, nil
		}
		close(r.done)
	}
	if err == nil && len(queueIDs) > 0 && s.committed != nil {
		s.committed(queueIDs)
	}
}

func (s *Sender) writeTx(batch []*sendRequest) ([]int64, error) {
	ctx := context.Background() // a taken request is written to the end
	var written []int64
	err := retry(ctx, func() error {
		written = written[:0]
		for _, r := range batch {
			r.results, r.err = nil, nil
		}
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			names := make([]string, 0, len(batch))
			for _, r := range batch {
				names = append(names, r.queue)
			}
			queues, depths, err := queuesForSend(ctx, tx, names)
			if err != nil {
				return err
			}
			// Queues in id order: a fixed lock order across transactions.
			byQueue := map[int64][]*sendRequest{}
			var ids []int64
			for _, r := range batch {
				q, ok := queues[r.queue]
				if !ok {
					r.err = fmt.Errorf("message send: queue %q: %w", r.queue, ErrNotFound)
					continue
				}
				if q.MaxDepth > 0 {
					if depths[q.ID]+int64(len(r.msgs)) > q.MaxDepth {
						r.err = &QueueFullError{Depth: depths[q.ID], MaxDepth: q.MaxDepth}
						continue
					}
					depths[q.ID] += int64(len(r.msgs))
				}
				if byQueue[q.ID] == nil {
					ids = append(ids, q.ID)
				}
				r.queueID = q.ID
				byQueue[q.ID] = append(byQueue[q.ID], r)
			}
			slices.Sort(ids)
			for _, id := range ids {
				reqs := byQueue[id]
				q := queues[reqs[0].queue]
				var all []SendMessage
				for _, r := range reqs {
					all = append(all, r.msgs...)
				}
				results, err := messageSend(ctx, tx, q, all)
				var verr *ValidationError
				if errors.As(err, &verr) && len(reqs) > 1 {
					return err // retried request by request by write
				}
				if errors.As(err, &verr) || errors.Is(err, ErrNotFound) {
					for _, r := range reqs {
						r.err = err
					}
					continue
				}
				if err != nil {
					return err
				}
				for _, r := range reqs {
					r.results, results = results[:len(r.msgs)], results[len(r.msgs):]
				}
				written = append(written, id)
			}
			return nil
		})
	})
	return written, err
}

// queuesForSend loads the named queues and, for those with a max_depth,
// their current depth.
func queuesForSend(ctx context.Context, tx pgx.Tx, names []string) (map[string]Queue, map[int64]int64, error) {
	rows, err := tx.Query(ctx, `
		SELECT `+queueColumns+`,
			CASE WHEN max_depth > 0 THEN
				(SELECT coalesce(sum(messages), 0)::bigint FROM ferry.queue_counts c WHERE c.queue_id = q.id)
			ELSE 0 END
		FROM ferry.queues q WHERE name = ANY($1)`, names)
	if err != nil {
		return nil, nil, interpretError("message send", err)
	}
	defer rows.Close()
	queues := map[string]Queue{}
	depths := map[int64]int64{}
	for rows.Next() {
		var depth int64
		q, err := scanQueue(rows, &depth)
		if err != nil {
			return nil, nil, interpretError("message send", err)
		}
		queues[q.Name] = q
		depths[q.ID] = depth
	}
	return queues, depths, interpretError("message send", rows.Err())
}
