package store

import (
	"context"
	"errors"
	"sync"
)

// ErrShuttingDown answers requests submitted after the server began to
// stop.
var ErrShuttingDown = errors.New("server is shutting down")

// coalescer is the group-commit machinery shared by Sender and Publisher:
// workers take submitted requests and hand them to write in batches, each
// batch one transaction.
//
// Small batches (under big items) are written one at a time: while one
// commits, the next gathers everything that arrives, so many concurrent
// small requests share a commit instead of spreading thinly over the
// workers. A batch that is already big does not wait, so large requests
// still write in parallel, up to the number of workers.
type coalescer[R any] struct {
	requests  chan R
	size      func(R) int
	write     func([]R)
	max, big  int
	smallSlot chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup

	// closing is set, under mu, before stop closes: no request is queued
	// after the workers' last drain.
	mu      sync.RWMutex
	closing bool
}

// newCoalescer starts workers (4 when not positive) that write batches of
// at most maxItems items (2000 when not positive), in batches of their own
// from big items on.
func newCoalescer[R any](workers, maxItems, big int, size func(R) int, write func([]R)) *coalescer[R] {
	if workers <= 0 {
		workers = 4
	}
	if maxItems <= 0 {
		maxItems = 2000
	}
	c := &coalescer[R]{
		requests:  make(chan R, 1024),
		size:      size,
		write:     write,
		max:       maxItems,
		big:       big,
		smallSlot: make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
	for range workers {
		c.wg.Add(1)
		go c.work()
	}
	return c
}

// submit queues r for writing. Once it returns nil, r will be written (or
// refused) and answered through whatever r carries.
func (c *coalescer[R]) submit(ctx context.Context, r R) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closing {
		return ErrShuttingDown
	}
	select {
	case c.requests <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops the workers after writing what was already submitted.
func (c *coalescer[R]) close() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	close(c.stop)
	c.wg.Wait()
}

func (c *coalescer[R]) work() {
	defer c.wg.Done()
	for {
		var first R
		select {
		case first = <-c.requests:
		case <-c.stop:
			for {
				select {
				case r := <-c.requests:
					c.write([]R{r})
				default:
					return
				}
			}
		}
		batch, small := c.gather(first)
		c.write(batch)
		if small {
			<-c.smallSlot
		}
	}
}

// gather builds a batch from first and what else is waiting; small reports
// whether the batch holds the small-transaction slot.
func (c *coalescer[R]) gather(first R) (batch []R, small bool) {
	batch = []R{first}
	n := c.size(first)
	add := func(r R) {
		batch = append(batch, r)
		n += c.size(r)
	}
	// drain takes what is already waiting, without blocking.
	drain := func() {
		for n < c.max {
			select {
			case r := <-c.requests:
				add(r)
			default:
				return
			}
		}
	}
	for n < c.max && n < c.big {
		select {
		case c.smallSlot <- struct{}{}:
			drain()
			return batch, true
		case r := <-c.requests:
			add(r)
		}
	}
	drain()
	return batch, false
}

// sendLockTimeout bounds a send transaction's wait for any one lock.
const sendLockTimeout = "5s"
