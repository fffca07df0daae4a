DROP TABLE IF EXISTS ferry.topic_samples;
ALTER TABLE ferry.queue_samples DROP COLUMN IF EXISTS added, DROP COLUMN IF EXISTS dead_lettered;
DROP TRIGGER IF EXISTS queue_counts_totals ON ferry.queue_counts;
DROP FUNCTION IF EXISTS ferry.queue_counts_totals();
ALTER TABLE ferry.queue_counts DROP COLUMN IF EXISTS added, DROP COLUMN IF EXISTS dead_lettered;
