-- Rows of slots below zero that the fold has not taken stay, and stay
-- counted: every reader sums all of a queue's rows.
DROP INDEX ferry.queue_counts_of_transactions_idx;
