package main

import (
	"context"
	"time"
)

// Scenarios 1-3: throughput of batch send, single-message send and
// receive+ack, raw SQL against Ferry over HTTP.

// sideQueues creates one queue per side (raw SQL's, then Ferry's) through
// the API and returns their ids.
func (b *Bench) sideQueues(ctx context.Context, prefix string) ([2]int64, error) {
	var ids [2]int64
	for _, s := range []side{rawSide, ferrySide} {
		id, err := b.createQueue(ctx, prefix+"-"+s.String())
		if err != nil {
			return ids, err
		}
		ids[s] = id
	}
	return ids, nil
}

// sideLoads are the two sides of a comparison under load: the same
// number of clients, each side's operation.
type sideLoads struct {
	label   string // names the loads in CPU profiles (label/raw, label/ferry)
	clients int
	prepare func(side) error // before every round
	check   func(side) error // after every round; nil: none
	ops     [2]loadOp        // by side
}

// compare measures both sides in alternating rounds (alternate), each
// round a runLoad of its side's operation between prepare and check.
func (b *Bench) compare(ctx context.Context, l sideLoads) (raw, ferry Phase, pairs []float64, err error) {
	if err := warmPool(ctx, b.raw, l.clients); err != nil {
		return Phase{}, Phase{}, nil, err
	}
	return b.alternate(ctx, b.opts.Duration, l.prepare, func(s side, d time.Duration) (Phase, error) {
		p, err := b.runLoad(ctx, l.label+"/"+s.String(), l.clients, d, l.ops[s])
		if err == nil && l.check != nil {
			err = l.check(s)
		}
		return p, err
	})
}

// numbered is op with each call's number among its worker's calls: worker
// w's i-th call is op(ctx, w, i).
func numbered(workers int, op func(ctx context.Context, w int, i int64) (int, error)) loadOp {
	counter := make([]int64, workers) // each worker touches its own
	return func(ctx context.Context, w int) (int, error) {
		i := counter[w]
		counter[w]++
		return op(ctx, w, i)
	}
}

func (b *Bench) batchSend(ctx context.Context) (*Section, error) {
	const batch, clients = 500, 8
	ids, err := b.sideQueues(ctx, "bench-batch")
	if err != nil {
		return nil, err
	}
	arr, req := bodies(batch), SendRequest(batch)
	raw, ferry, pairs, err := b.compare(ctx, sideLoads{label: "batch-send", clients: clients, prepare: func(side) error { return b.reset(ctx) },
		ops: [2]loadOp{
			func(ctx context.Context, _ int) (int, error) {
				_, err := b.raw.Exec(ctx, rawInsertBatch, ids[rawSide], arr)
				return batch, err
			},
			func(ctx context.Context, _ int) (int, error) {
				return batch, b.client.Send(ctx, "bench-batch-ferry", req)
			},
		}})
	if err != nil {
		return nil, err
	}
	return throughputSection("send throughput", "request latency", raw, ferry, pairs, 0.5, batchSendHow(clients, batch, b.opts.Duration, b.roundsNote)), nil
}

func (b *Bench) singleSend(ctx context.Context) (*Section, error) {
	const clients = 32
	ids, err := b.sideQueues(ctx, "bench-single")
	if err != nil {
		return nil, err
	}
	req := SendRequest(1)
	raw, ferry, pairs, err := b.compare(ctx, sideLoads{label: "single-send", clients: clients, prepare: func(side) error { return b.reset(ctx) },
		ops: [2]loadOp{
			func(ctx context.Context, _ int) (int, error) {
				_, err := b.raw.Exec(ctx, rawInsertOne, ids[rawSide], body)
				return 1, err
			},
			func(ctx context.Context, _ int) (int, error) { return 1, b.client.Send(ctx, "bench-single-ferry", req) },
		}})
	if err != nil {
		return nil, err
	}
	return throughputSection("send throughput", "request latency", raw, ferry, pairs, 1.5, singleSendHow(clients, b.opts.Duration, b.roundsNote)), nil
}

func (b *Bench) receiveAck(ctx context.Context) (*Section, error) {
	const batch, clients = 100, 8
	ids, err := b.sideQueues(ctx, "bench-recv")
	if err != nil {
		return nil, err
	}
	raw, ferry, pairs, err := b.compare(ctx, sideLoads{label: "receive-ack", clients: clients,
		prepare: func(s side) error {
			if err := b.reset(ctx); err != nil {
				return err
			}
			return b.fill(ctx, ids[s], b.opts.Prefill)
		},
		ops: [2]loadOp{func(ctx context.Context, _ int) (int, error) {
			claimed, err := rawClaimIDs(ctx, b.raw, ids[rawSide], batch)
			if err != nil {
				return 0, err
			}
			if len(claimed) == 0 {
				return 0, errDrained
			}
			_, err = b.raw.Exec(ctx, rawDelete, ids[rawSide], claimed)
			return len(claimed), err
		}, func(ctx context.Context, _ int) (int, error) {
			receipts, err := b.client.Receive(ctx, "bench-recv-ferry", batch, 0)
			if err != nil {
				return 0, err
			}
			if len(receipts) == 0 {
				return 0, errDrained
			}
			return len(receipts), b.client.Ack(ctx, "bench-recv-ferry", receipts)
		}}})
	if err != nil {
		return nil, err
	}
	return throughputSection("receive+ack throughput", "receive+ack cycle latency", raw, ferry, pairs, 0.5,
		receiveAckHow(clients, batch, b.opts.Duration, b.opts.Prefill, b.roundsNote)), nil
}
