ALTER TABLE ferry.queues
    DROP COLUMN IF EXISTS tags,
    DROP COLUMN IF EXISTS content_based_dedup,
    DROP COLUMN IF EXISTS max_message_size,
    DROP COLUMN IF EXISTS receive_wait_seconds;
