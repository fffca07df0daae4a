-- Shapes whose every plan does work proportional to its batch (DESIGN.md
-- invariant 11), however few rows the planner believes a new topic or
-- queue has and whichever plan a pooled connection cached.

-- The first event of a partition at or after a time is the one with the
-- lowest offset among those published first (several events of a publish
-- may share a clock reading): with "offset" in the index, that is the
-- first entry of the range, not a sort of every event after the time.
-- It serves retention (oldest first) as the index it replaces did.
CREATE INDEX events_time_offset_idx ON ferry.events (topic_id, partition, published_at, "offset");
DROP INDEX ferry.events_time_idx;

-- A queue's latest failed (or successful) push attempts are the first
-- entries of one range, without walking past the others; the latest of
-- both kinds, a merge of two such ranges.
CREATE INDEX push_attempts_queue_ok_idx ON ferry.push_attempts (queue_id, ok, at DESC);
DROP INDEX ferry.push_attempts_queue_idx;

-- Expiry sweeps find their oldest rows through an index, then delete each
-- by its ctid with one of these: a statement of its own, planned each time
-- the sweep runs, whose only sensible plan is one TID fetch. Deleting them
-- in the sweep's statement (ctid = ANY(ARRAY(...)), or a join on ctid)
-- lets a plan cached while the table was empty scan the whole table.
CREATE FUNCTION ferry.push_attempt_delete(t tid) RETURNS boolean LANGUAGE sql AS $$
    /* ferry:push_attempt_delete */
    DELETE FROM ferry.push_attempts WHERE ctid = t RETURNING true
$$;
-- Deletes the row only while it still ends its window when the sweep read
-- it: an id a publish took over meanwhile (a new window) stays.
CREATE FUNCTION ferry.event_dedup_delete(t tid, expired timestamptz) RETURNS boolean LANGUAGE sql AS $$
    /* ferry:event_dedup_delete */
    DELETE FROM ferry.event_dedup WHERE ctid = t AND expires_at = expired RETURNING true
$$;
