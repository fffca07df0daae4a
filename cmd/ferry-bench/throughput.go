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

func (b *Bench) batchSend(ctx context.Context) (*Section, error) {
	const batch, clients = 500, 8
	rawID, err := b.createQueue(ctx, "bench-batch-raw")
	if err != nil {
		return nil, err
	}
	if _, err := b.createQueue(ctx, "bench-batch-ferry"); err != nil {
		return nil, err
	}
	if err := warmPool(ctx, b.raw, clients); err != nil {
		return nil, err
	}
	arr, req := bodies(batch), SendRequest(batch)
	raw, ferry, pairs, err := b.alternate(ctx, b.opts.Duration,
		func(side) error { return b.reset(ctx) },
		func(s side, d time.Duration) (Phase, error) {
			if s == rawSide {
				return b.runLoad(ctx, "batch-send/raw", clients, d, func(ctx context.Context, _ int) (int, error) {
					_, err := b.raw.Exec(ctx, rawInsertBatch, rawID, arr)
					return batch, err
				})
			}
			return b.runLoad(ctx, "batch-send/ferry", clients, d, func(ctx context.Context, _ int) (int, error) {
				return batch, b.client.Send(ctx, "bench-batch-ferry", req)
			})
		})
	if err != nil {
		return nil, err
	}
	rows := throughputRows("send throughput", raw, ferry, pairs, 0.5)
	rows = append(rows, latencyRows("request latency", Summarize(raw.Latencies), Summarize(ferry.Latencies))...)
	rows = append(rows, evidenceRows(raw, ferry)...)
	return &Section{
		Rows: rows,
		How: fmt.Sprintf("%d concurrent clients, each sending batches of %d messages (the same ~110-byte JSON body) for %s per side. "+
			"Raw: one `INSERT INTO ferry.messages ... SELECT ... FROM unnest($2::text[])` per batch, ids from `nextval`, autocommit (one transaction per batch), "+
			"on a pgxpool. Ferry: `POST /v1/queues/{q}/messages` with %d messages (request body encoded once), keep-alive HTTP; "+
			"Ferry's sender may merge concurrent requests into one transaction. "+b.roundsNote("TRUNCATE + CHECKPOINT"),
			clients, batch, b.opts.Duration, batch),
	}, nil
}

func (b *Bench) singleSend(ctx context.Context) (*Section, error) {
	const clients = 32
	rawID, err := b.createQueue(ctx, "bench-single-raw")
	if err != nil {
		return nil, err
	}
	if _, err := b.createQueue(ctx, "bench-single-ferry"); err != nil {
		return nil, err
	}
	if err := warmPool(ctx, b.raw, clients); err != nil {
		return nil, err
	}
	req := SendRequest(1)
	raw, ferry, pairs, err := b.alternate(ctx, b.opts.Duration,
		func(side) error { return b.reset(ctx) },
		func(s side, d time.Duration) (Phase, error) {
			if s == rawSide {
				return b.runLoad(ctx, "single-send/raw", clients, d, func(ctx context.Context, _ int) (int, error) {
					_, err := b.raw.Exec(ctx, rawInsertOne, rawID, body)
					return 1, err
				})
			}
			return b.runLoad(ctx, "single-send/ferry", clients, d, func(ctx context.Context, _ int) (int, error) {
				return 1, b.client.Send(ctx, "bench-single-ferry", req)
			})
		})
	if err != nil {
		return nil, err
	}
	rows := throughputRows("send throughput", raw, ferry, pairs, 1.5)
	rows = append(rows, latencyRows("request latency", Summarize(raw.Latencies), Summarize(ferry.Latencies))...)
	rows = append(rows, evidenceRows(raw, ferry)...)
	return &Section{
		Rows: rows,
		How: fmt.Sprintf("%d concurrent clients, each sending one message at a time for %s per side. "+
			"Raw: one single-row `INSERT` per transaction (autocommit) on %d pooled connections, so PostgreSQL's own group commit "+
			"is all that merges their fsyncs. Ferry: %d concurrent HTTP clients each `POST`ing one message; Ferry's sender "+
			"coalesces the requests that arrive while a transaction commits into the next one (SendWorkers transactions in flight). "+
			"Latency is per request (one message). "+b.roundsNote("TRUNCATE + CHECKPOINT"),
			clients, b.opts.Duration, clients, clients),
	}, nil
}

func (b *Bench) receiveAck(ctx context.Context) (*Section, error) {
	const batch, clients = 100, 8
	ids := map[side]int64{}
	for s, name := range map[side]string{rawSide: "bench-recv-raw", ferrySide: "bench-recv-ferry"} {
		id, err := b.createQueue(ctx, name)
		if err != nil {
			return nil, err
		}
		ids[s] = id
	}
	if err := warmPool(ctx, b.raw, clients); err != nil {
		return nil, err
	}
	raw, ferry, pairs, err := b.alternate(ctx, b.opts.Duration,
		func(s side) error {
			if err := b.reset(ctx); err != nil {
				return err
			}
			return b.fill(ctx, ids[s], b.opts.Prefill)
		},
		func(s side, d time.Duration) (Phase, error) {
			if s == rawSide {
				return b.runLoad(ctx, "receive-ack/raw", clients, d, func(ctx context.Context, _ int) (int, error) {
					claimed, err := rawClaimIDs(ctx, b.raw, ids[rawSide], batch)
					if err != nil {
						return 0, err
					}
					if len(claimed) == 0 {
						return 0, errDrained
					}
					_, err = b.raw.Exec(ctx, rawDelete, ids[rawSide], claimed)
					return len(claimed), err
				})
			}
			return b.runLoad(ctx, "receive-ack/ferry", clients, d, func(ctx context.Context, _ int) (int, error) {
				receipts, err := b.client.Receive(ctx, "bench-recv-ferry", batch, 0)
				if err != nil {
					return 0, err
				}
				if len(receipts) == 0 {
					return 0, errDrained
				}
				return len(receipts), b.client.Ack(ctx, "bench-recv-ferry", receipts)
			})
		})
	if err != nil {
		return nil, err
	}
	rows := throughputRows("receive+ack throughput", raw, ferry, pairs, 0.5)
	rows = append(rows, latencyRows("receive+ack cycle latency", Summarize(raw.Latencies), Summarize(ferry.Latencies))...)
	rows = append(rows, evidenceRows(raw, ferry)...)
	return &Section{
		Rows: rows,
		How: fmt.Sprintf("%d concurrent consumers for %s per side, each looping: claim up to %d, then acknowledge them. "+
			"Before each round the queue is prefilled with %s messages (`INSERT ... SELECT generate_series`, then VACUUM ANALYZE and CHECKPOINT). "+
			"Raw: Ferry's claim statement (`SELECT ... ORDER BY visible_at, id LIMIT 100 FOR UPDATE SKIP LOCKED` feeding an `UPDATE` of "+
			"visible_at, receive_count and claim_token, returning every column), then `DELETE ... WHERE id = ANY($2)`: two autocommit statements. "+
			"Ferry: `POST .../receive` `{\"max_messages\":100}` and `POST .../ack` with the 100 receipts. A cycle is the pair; throughput counts acked messages. "+
			b.roundsNote("TRUNCATE and the prefill"),
			clients, b.opts.Duration, batch, fmtInt(int64(b.opts.Prefill))),
		Notes: drainedNote(raw, ferry),
	}, nil
}
