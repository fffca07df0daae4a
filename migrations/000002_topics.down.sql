DROP TABLE IF EXISTS ferry.event_dedup, ferry.events, ferry.topic_partitions, ferry.topics;
DROP FUNCTION IF EXISTS ferry.raise_not_found(text);
