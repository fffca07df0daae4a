-- Sections in the reverse order of the up migration.

-- ==== producers: publish ====================================================

-- Events committed through the SQL API but not appended yet are lost with
-- the table (the previous release has no relay): their dedup claims go too.
DELETE FROM ferry.event_dedup WHERE "offset" = -2;
DROP FUNCTION IF EXISTS ferry.publish_batch(text, jsonb);
DROP FUNCTION IF EXISTS ferry.publish(text, text, jsonb, jsonb);
DROP FUNCTION IF EXISTS ferry.publish_events(text, jsonb, boolean);
DROP FUNCTION IF EXISTS ferry.publish_claim(ferry.topics, text[], integer[]);
DROP FUNCTION IF EXISTS ferry.publish_check_fields(jsonb, boolean);
DROP FUNCTION IF EXISTS ferry.publish_check_shape(jsonb, boolean);
DROP FUNCTION IF EXISTS ferry.publish_kind(jsonb);
DROP FUNCTION IF EXISTS ferry.valid_traceparent(text);
DROP FUNCTION IF EXISTS ferry.json_compact_size(jsonb);
DROP FUNCTION IF EXISTS ferry.partition_for_key(text, integer);
DROP SEQUENCE IF EXISTS ferry.event_spread_seq;
DROP SEQUENCE IF EXISTS ferry.event_pending_seq;
DROP TABLE IF EXISTS ferry.event_pending;

-- ==== producers: send =======================================================

-- ==== consumers =============================================================

-- ==== common ================================================================

-- Fold the per-transaction counter rows into the base slots first: the
-- previous release would still count them (it sums every slot of a
-- queue), but nothing would fold them any more.
SELECT ferry.queue_counts_fold(2147483647);
DROP FUNCTION IF EXISTS ferry.queue_counts_fold(integer);
DROP INDEX IF EXISTS ferry.queue_counts_transaction_idx;
DROP FUNCTION IF EXISTS ferry.counts_per_transaction();
CREATE OR REPLACE FUNCTION ferry.count_slot() RETURNS integer LANGUAGE sql STABLE AS
$$ SELECT pg_backend_pid() % 64 $$;
DROP TABLE IF EXISTS ferry.sql_limits;
DROP FUNCTION IF EXISTS ferry.raise(integer, text, text);
REVOKE USAGE ON SCHEMA ferry FROM ferry_producer, ferry_consumer;
-- The roles are the cluster's: other databases may still use them.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['ferry_producer', 'ferry_consumer'] LOOP
        BEGIN
            EXECUTE format('DROP ROLE IF EXISTS %I', r);
        EXCEPTION WHEN dependent_objects_still_exist OR insufficient_privilege THEN NULL;
        END;
    END LOOP;
END
$$;
