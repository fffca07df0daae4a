-- Sections in the reverse order of the up migration.

-- ==== producers: publish ====================================================

-- ==== producers: send =======================================================

DROP FUNCTION IF EXISTS ferry.send_batch(text, jsonb);
DROP FUNCTION IF EXISTS ferry.send(text, jsonb, jsonb);
DROP FUNCTION IF EXISTS ferry.send_write(ferry.queues, ferry.send_columns, integer);
DROP FUNCTION IF EXISTS ferry.send_messages(text, jsonb, boolean);
DROP FUNCTION IF EXISTS ferry.send_admit(ferry.queues, ferry.send_columns);
DROP FUNCTION IF EXISTS ferry.send_plan(ferry.queues, jsonb, boolean);
DROP TYPE IF EXISTS ferry.send_columns;
DROP FUNCTION IF EXISTS ferry.send_check_message(jsonb, integer, boolean, integer);
DROP FUNCTION IF EXISTS ferry.send_valid_time(text);
DROP FUNCTION IF EXISTS ferry.send_check_shape(jsonb, boolean);
DROP FUNCTION IF EXISTS ferry.send_valid_traceparent(text);
DROP FUNCTION IF EXISTS ferry.send_compact_size(jsonb);
DROP FUNCTION IF EXISTS ferry.send_go_string_size(text);
DROP FUNCTION IF EXISTS ferry.send_json_kind(jsonb);
DROP FUNCTION IF EXISTS ferry.send_field(boolean, integer, text);
DROP FUNCTION IF EXISTS ferry.message_send_dedup_live(bigint, text[]);
DROP FUNCTION IF EXISTS ferry.message_send_depth_lock(bigint[]);
DROP FUNCTION IF EXISTS ferry.message_send_dedup_answer(bigint, text[]);
DROP FUNCTION IF EXISTS ferry.message_send_grouped(bigint, text[], text[], text[], text[], bigint[], timestamptz[], integer);
DROP FUNCTION IF EXISTS ferry.message_send_plain(bigint, text[], text[], bigint[], timestamptz[]);

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
