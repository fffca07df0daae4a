-- Sections in the reverse order of the up migration.

-- ==== producers: publish ====================================================

-- ==== producers: send =======================================================

-- ==== consumers =============================================================

DROP FUNCTION IF EXISTS ferry.extend(text, text[], integer);
DROP FUNCTION IF EXISTS ferry.nack(text, text[], jsonb);
DROP FUNCTION IF EXISTS ferry.consumer_nack_options(jsonb);
DROP FUNCTION IF EXISTS ferry.ack(text, text[]);
DROP FUNCTION IF EXISTS ferry.receive(text, integer, integer);
DROP FUNCTION IF EXISTS ferry.consumer_results(text[], bigint[], bigint[], bigint[], bigint[]);
DROP FUNCTION IF EXISTS ferry.consumer_receipts(text[]);
DROP FUNCTION IF EXISTS ferry.consumer_target(text, boolean);
DROP FUNCTION IF EXISTS ferry.consumer_invalid(text[]);
DROP FUNCTION IF EXISTS ferry.receipt_decode(text);
DROP FUNCTION IF EXISTS ferry.receipt_encode(bigint, bigint);
DROP FUNCTION IF EXISTS ferry.message_extend(bigint, bigint[], bigint[], bigint);
DROP FUNCTION IF EXISTS ferry.message_nack(bigint, bigint[], bigint[], boolean, integer, text, bigint, integer, integer);
DROP FUNCTION IF EXISTS ferry.message_ack(bigint, bigint[], bigint[], boolean);
DROP FUNCTION IF EXISTS ferry.message_dead_letter(bigint, bigint[], integer);
DROP FUNCTION IF EXISTS ferry.message_claim(bigint, integer, integer, bigint, uuid);
DROP FUNCTION IF EXISTS ferry.message_group_lock(bigint, bigint[]);

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
