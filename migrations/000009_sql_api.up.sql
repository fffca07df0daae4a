-- The SQL API (API.md § SQL API): functions an application calls inside
-- its own transaction. They run with Ferry's rights (SECURITY DEFINER,
-- fixed search_path) and are granted to two NOLOGIN roles, never to
-- PUBLIC. Nothing they do may hold a lock that REST traffic needs until
-- the caller commits (the caller's transaction may stay open for minutes).
--
-- Sections: common; consumers; producers: send; producers: publish.

-- ==== common ================================================================

-- Roles are global to the cluster: another database of it (a second Ferry,
-- a test template) may have made them already, perhaps at this moment.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['ferry_producer', 'ferry_consumer'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN NULL;
                WHEN insufficient_privilege THEN
                    RAISE EXCEPTION 'ferry: cannot create role %', r
                        USING HINT = 'Ferry''s database user needs CREATEROLE, or a superuser creates '
                            'the NOLOGIN roles ferry_producer and ferry_consumer before Ferry starts.';
            END;
        END IF;
    END LOOP;
END
$$;
GRANT USAGE ON SCHEMA ferry TO ferry_producer, ferry_consumer;

-- What REST answers with a 4xx, the SQL API raises: SQLSTATE FR<status>
-- (FR400, FR404, FR409, FR413, FR429) and the message
-- "ferry: <code>: <detail>", <code> being the REST problem code.
CREATE FUNCTION ferry.raise(status integer, code text, detail text) RETURNS bigint
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'FR' || status::text, MESSAGE = 'ferry: ' || code || ': ' || detail;
END $$;

-- The request limits the REST API has (FERRY_MAX_BODY_BYTES,
-- FERRY_MAX_BATCH), which the SQL API applies too: Ferry writes its
-- configuration here when it starts (store.SQLLimitsSet), and only if it
-- differs. One row.
CREATE TABLE ferry.sql_limits (
    one            boolean PRIMARY KEY DEFAULT true CHECK (one),
    max_body_bytes integer NOT NULL DEFAULT 262144,
    max_batch      integer NOT NULL DEFAULT 1000
);
INSERT INTO ferry.sql_limits DEFAULT VALUES;

-- Depth counters in a caller's transaction. The triggers of migration
-- 000001 add to the queue_counts row of the slot of the writing backend
-- (pg_backend_pid() % 64) and hold its lock to commit: fine for Ferry's own
-- short transactions, but an application's transaction that sent or acked
-- through the SQL API would stall, until it ends, every REST write to the
-- queue from a backend with the same slot. A SQL API function calls
-- ferry.counts_per_transaction() first: for the rest of the transaction its
-- counters go to a row of their own (slot 64 and up, from the transaction
-- id), which no other transaction writes; the maintenance sweep folds such
-- rows back into the 64 base slots (ferry.queue_counts_fold). Sums over a
-- queue's slots (stats, max_depth, orphans) count them all the same.
CREATE OR REPLACE FUNCTION ferry.count_slot() RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN current_setting('ferry.counts', true) = 'transaction'
        THEN 64 + (txid_current() % 2147483583)::integer
        ELSE pg_backend_pid() % 64 END
$$;

CREATE FUNCTION ferry.counts_per_transaction() RETURNS void LANGUAGE sql AS $$
    SELECT set_config('ferry.counts', 'transaction', true)
$$;

CREATE INDEX queue_counts_transaction_idx ON ferry.queue_counts (queue_id, slot) WHERE slot >= 64;

-- Folds up to lim committed per-transaction rows into the base slots, and
-- returns how many it folded. With none it writes nothing.
CREATE FUNCTION ferry.queue_counts_fold(lim integer) RETURNS bigint LANGUAGE sql AS $$
    /* ferry:queue_counts_fold */
    WITH victims AS MATERIALIZED (
        SELECT ctid FROM ferry.queue_counts WHERE slot >= 64
        ORDER BY queue_id, slot LIMIT lim
        FOR UPDATE SKIP LOCKED
    ),
    moved AS (
        DELETE FROM ferry.queue_counts c USING victims v WHERE c.ctid = v.ctid
        RETURNING c.queue_id, c.slot, c.messages, c.dead_letters
    ),
    folded AS (
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages, dead_letters)
        SELECT queue_id, slot % 64, sum(messages), sum(dead_letters)
        FROM moved GROUP BY queue_id, slot % 64 ORDER BY queue_id, slot % 64
        ON CONFLICT (queue_id, slot) DO UPDATE
            SET messages = c.messages + excluded.messages, dead_letters = c.dead_letters + excluded.dead_letters
    )
    SELECT count(*) FROM moved
$$;

-- ==== consumers =============================================================

-- ==== producers: send =======================================================

-- ==== producers: publish ====================================================
