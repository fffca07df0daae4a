package store

import "context"

// countsFoldBatch bounds the counter rows one fold statement takes.
const countsFoldBatch = 5000

// QueueCountsFold adds the committed counter rows of SQL API transactions
// (one per transaction and queue: ferry.count_slot_of_transaction in
// store/definitions/counters.sql) into their queue's slot 128, a batch a
// statement, until a batch comes back short or there were maxBatches.
// The depth and totals every reader sums are the same before and after;
// the fold only keeps the rows a queue's sums read few. A fold that finds
// nothing writes nothing. It returns how many rows it folded.
func QueueCountsFold(ctx context.Context, db DBTX, maxBatches int) (int64, error) {
	var total int64
	for range maxBatches {
		var n int64
		if err := db.QueryRow(ctx, `/* ferry:counts_fold */ SELECT ferry.counts_fold($1)`, countsFoldBatch).Scan(&n); err != nil {
			return total, interpretError("counts fold", err)
		}
		total += n
		if n < countsFoldBatch || ctx.Err() != nil {
			break
		}
	}
	return total, nil
}
