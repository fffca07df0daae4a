DROP TABLE IF EXISTS ferry.group_samples;
DROP TABLE IF EXISTS ferry.queue_samples;
