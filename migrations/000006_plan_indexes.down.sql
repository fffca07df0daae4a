DROP FUNCTION ferry.event_dedup_delete(tid, timestamptz);
DROP FUNCTION ferry.push_attempt_delete(tid);
CREATE INDEX push_attempts_queue_idx ON ferry.push_attempts (queue_id, at DESC);
DROP INDEX ferry.push_attempts_queue_ok_idx;
CREATE INDEX events_time_idx ON ferry.events (topic_id, partition, published_at);
DROP INDEX ferry.events_time_offset_idx;
