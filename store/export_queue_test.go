package store

import "context"

// MessagePurgeBatch is MessagePurge with batches of the given size, so
// that the plan tests can make a batch small next to their backlog.
func MessagePurgeBatch(ctx context.Context, db TxBeginner, queueID int64, batch int) error {
	return messagePurge(ctx, db, queueID, batch)
}

// DeadLetterPurgeBatch is DeadLetterPurge with batches of the given size.
func DeadLetterPurgeBatch(ctx context.Context, db DBTX, queueID int64, batch int) error {
	return deadLetterPurge(ctx, db, queueID, batch)
}
