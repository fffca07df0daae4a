package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Scenarios 1-3: throughput of batch send, single-message send and
// receive+ack, raw SQL against Ferry over HTTP.

// throughputRows are the headline rows of a throughput comparison: the
// rates over all rounds, and the ratio of each pair of rounds.
func throughputRows(metric string, raw, ferry Phase, pairs []float64, target float64) []Row {
	ratio := ferry.Rate() / raw.Rate()
	each := make([]string, len(pairs))
	for i, p := range pairs {
		each[i] = fmt.Sprintf("%.2f", p)
	}
	return []Row{{
		Metric: metric,
		Raw:    fmtRate(raw.Rate()),
		Ferry:  fmtRate(ferry.Rate()),
		Ratio:  fmt.Sprintf("%.2f×", ratio),
		Target: fmt.Sprintf("≥ %.1f×", target),
		Pass:   pass(ratio >= target),
	}, {
		Metric: "Ferry/raw in each round pair (noise)",
		Ratio:  strings.Join(each, " · "),
	}}
}

// roundsNote describes the alternation, for the "how measured" texts.
func (b *Bench) roundsNote(extra string) string {
	return fmt.Sprintf("Each side runs %d rounds of %s in the order raw, Ferry, Ferry, raw, ..., each round after %s and a %s warm-up that is not counted.",
		b.opts.Rounds, b.opts.Duration/time.Duration(b.opts.Rounds), extra, warmupFor(b.opts.Duration/time.Duration(b.opts.Rounds)))
}

func drainedNote(raw, ferry Phase) []string {
	if raw.Drained || ferry.Drained {
		return []string{"Note: a queue ran empty before the end of a window; that window was cut at the last completed operation (raise -prefill)."}
	}
	return nil
}

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

// compareLoads measures raw and Ferry with the same number of clients, in
// alternating rounds (alternate), each round a runLoad of its side's
// operation after prepare; label names the loads in CPU profiles.
func (b *Bench) compareLoads(ctx context.Context, label string, clients int, prepare func(side) error, raw, ferry loadOp) (rawRes, ferryRes Phase, pairs []float64, err error) {
	if err := warmPool(ctx, b.raw, clients); err != nil {
		return Phase{}, Phase{}, nil, err
	}
	return b.alternate(ctx, b.opts.Duration, prepare, func(s side, d time.Duration) (Phase, error) {
		op := ferry
		if s == rawSide {
			op = raw
		}
		return b.runLoad(ctx, label+"/"+s.String(), clients, d, op)
	})
}

// throughputSection is the rows of scenarios 1-3: the rates against the
// target, the latencies of the operations, and the evidence.
func throughputSection(metric, latency string, raw, ferry Phase, pairs []float64, target float64, how string) *Section {
	rows := throughputRows(metric, raw, ferry, pairs, target)
	rows = append(rows, latencyRows(latency, Summarize(raw.Latencies), Summarize(ferry.Latencies))...)
	rows = append(rows, evidenceRows(raw, ferry)...)
	return &Section{Rows: rows, How: how, Notes: drainedNote(raw, ferry)}
}

func (b *Bench) batchSend(ctx context.Context) (*Section, error) {
	const batch, clients = 500, 8
	ids, err := b.sideQueues(ctx, "bench-batch")
	if err != nil {
		return nil, err
	}
	arr, req := bodies(batch), SendRequest(batch)
	raw, ferry, pairs, err := b.compareLoads(ctx, "batch-send", clients, func(side) error { return b.reset(ctx) },
		func(ctx context.Context, _ int) (int, error) {
			_, err := b.raw.Exec(ctx, rawInsertBatch, ids[rawSide], arr)
			return batch, err
		},
		func(ctx context.Context, _ int) (int, error) {
			return batch, b.client.Send(ctx, "bench-batch-ferry", req)
		})
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
	raw, ferry, pairs, err := b.compareLoads(ctx, "single-send", clients, func(side) error { return b.reset(ctx) },
		func(ctx context.Context, _ int) (int, error) {
			_, err := b.raw.Exec(ctx, rawInsertOne, ids[rawSide], body)
			return 1, err
		},
		func(ctx context.Context, _ int) (int, error) { return 1, b.client.Send(ctx, "bench-single-ferry", req) })
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
	raw, ferry, pairs, err := b.compareLoads(ctx, "receive-ack", clients,
		func(s side) error {
			if err := b.reset(ctx); err != nil {
				return err
			}
			return b.fill(ctx, ids[s], b.opts.Prefill)
		},
		func(ctx context.Context, _ int) (int, error) {
			claimed, err := rawClaimIDs(ctx, b.raw, ids[rawSide], batch)
			if err != nil {
				return 0, err
			}
			if len(claimed) == 0 {
				return 0, errDrained
			}
			_, err = b.raw.Exec(ctx, rawDelete, ids[rawSide], claimed)
			return len(claimed), err
		},
		func(ctx context.Context, _ int) (int, error) {
			receipts, err := b.client.Receive(ctx, "bench-recv-ferry", batch, 0)
			if err != nil {
				return 0, err
			}
			if len(receipts) == 0 {
				return 0, errDrained
			}
			return len(receipts), b.client.Ack(ctx, "bench-recv-ferry", receipts)
		})
	if err != nil {
		return nil, err
	}
	return throughputSection("receive+ack throughput", "receive+ack cycle latency", raw, ferry, pairs, 0.5,
		receiveAckHow(clients, batch, b.opts.Duration, b.opts.Prefill, b.roundsNote)), nil
}
