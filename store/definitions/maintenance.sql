-- Expiry sweeps find their oldest rows through an index, then delete each
-- by its ctid with one of these: a statement of its own, planned each time
-- the sweep runs, whose only sensible plan is one TID fetch. Deleting them
-- in the sweep's statement (ctid = ANY(ARRAY(...)), or a join on ctid)
-- lets a plan cached while the table was empty scan the whole table.
CREATE OR REPLACE FUNCTION ferry.push_attempt_delete(t tid) RETURNS boolean LANGUAGE sql AS $$
    /* ferry:push_attempt_delete */
    DELETE FROM ferry.push_attempts WHERE ctid = t RETURNING true
$$;

-- Deletes the row only while it still ends its window when the sweep read
-- it: an id a publish took over meanwhile (a new window) stays.
CREATE OR REPLACE FUNCTION ferry.event_dedup_delete(t tid, expired timestamptz) RETURNS boolean LANGUAGE sql AS $$
    /* ferry:event_dedup_delete */
    DELETE FROM ferry.event_dedup WHERE ctid = t AND expires_at = expired RETURNING true
$$;
