-- Dead letters into another queue (API.md § Work queues): a queue or a
-- subscription (a queue row too) may name a queue its dead letters move
-- into, as new available messages of that queue (store/doc.go, # Dead
-- letters). A nullable column without a default: adding it rewrites
-- nothing, and the previous release's statements keep working. Deleting
-- the target sets it back to NULL on every source, in the DELETE's own
-- transaction: its sources keep their dead letters with them again, and
-- no source ever names a queue that is gone.
ALTER TABLE ferry.queues
    ADD COLUMN dead_letter_queue_id bigint REFERENCES ferry.queues (id) ON DELETE SET NULL;
-- A target's sources (dead_letter_sources, ListDeadLetterSourceQueues),
-- and the foreign key's check when a target is deleted.
CREATE INDEX queues_dead_letter_queue_idx ON ferry.queues (dead_letter_queue_id)
    WHERE dead_letter_queue_id IS NOT NULL;
