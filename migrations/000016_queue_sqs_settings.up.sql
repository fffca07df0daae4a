-- Queue settings the SQS model has and REST lacked (API.md § Work queues,
-- openapi.yaml's Queue): the default long poll of a receive that gives no
-- wait, a queue's own message size limit (NULL: the server's
-- FERRY_MAX_BODY_BYTES), deduplication by content of messages sent
-- without a dedup id, and tags. Constant defaults: adding the columns
-- rewrites nothing, and the previous release's statements, which name
-- none of them, keep working.
ALTER TABLE ferry.queues
    ADD COLUMN receive_wait_seconds integer NOT NULL DEFAULT 0,
    ADD COLUMN max_message_size integer,
    ADD COLUMN content_based_dedup boolean NOT NULL DEFAULT false,
    ADD COLUMN tags jsonb NOT NULL DEFAULT '{}';
-- Until now a FIFO queue (a name ending in .fifo) always deduplicated an
-- SQS message without MessageDeduplicationId by its body's SHA-256: keep
-- that for the FIFO queues that exist.
UPDATE ferry.queues SET content_based_dedup = true WHERE topic_id IS NULL AND name LIKE '%.fifo';
