-- The counter rows of SQL API transactions (definitions generation 14:
-- ferry.count_slot_of_transaction, one row of ferry.queue_counts per
-- transaction and queue, at a slot below zero) until ferry.counts_fold
-- adds them into slot 128: the fold finds them by this index.
CREATE INDEX queue_counts_of_transactions_idx ON ferry.queue_counts (queue_id, slot) WHERE slot < 0;
