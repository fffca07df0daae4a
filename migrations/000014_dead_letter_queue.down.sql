DROP INDEX IF EXISTS ferry.queues_dead_letter_queue_idx;
ALTER TABLE ferry.queues DROP COLUMN IF EXISTS dead_letter_queue_id;
