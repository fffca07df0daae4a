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
-- 000001 add to the queue_counts row of the writing backend's slot
-- (pg_backend_pid() % 64) and hold its lock to commit: fine for Ferry's own
-- short transactions, but an application's transaction that sent or acked
-- through the SQL API would stall, until it ends, every REST write to the
-- queue from a backend with the same slot. So a SQL API function calls
-- ferry.counts_per_transaction() before it writes: for the rest of the
-- transaction the triggers record their changes in
-- ferry.queue_count_deltas instead, which nobody else writes, and a
-- deferred trigger adds them up into the slots when the transaction
-- commits: the slot is locked from then to the end of the commit only,
-- as a REST write's is. (A caller that runs SET CONSTRAINTS ALL IMMEDIATE
-- applies them at once, and holds the slot from then on.)
CREATE FUNCTION ferry.counts_per_transaction() RETURNS void LANGUAGE sql AS $$
    SELECT set_config('ferry.counts', 'transaction', true)
$$;

-- Unlogged: a row lives only inside its transaction (the deferred trigger
-- deletes it before the commit), so there is nothing to recover.
CREATE UNLOGGED TABLE ferry.queue_count_deltas (
    xact         xid8   NOT NULL DEFAULT pg_current_xact_id(),
    queue_id     bigint NOT NULL,
    messages     bigint NOT NULL DEFAULT 0,
    dead_letters bigint NOT NULL DEFAULT 0
);
CREATE INDEX queue_count_deltas_xact_idx ON ferry.queue_count_deltas (xact);

-- At commit: every delta of the transaction, summed per queue, into its
-- slot, in queue order (the lock order of every counter write). The
-- first of the transaction's delta rows to fire does it all; the others
-- find nothing left.
CREATE FUNCTION ferry.queue_count_deltas_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH d AS (
        DELETE FROM ferry.queue_count_deltas WHERE xact = pg_current_xact_id()
        RETURNING queue_id, messages, dead_letters
    )
    INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages, dead_letters)
    SELECT queue_id, pg_backend_pid() % 64, sum(messages), sum(dead_letters)
    FROM d GROUP BY queue_id ORDER BY queue_id
    ON CONFLICT (queue_id, slot) DO UPDATE
        SET messages = c.messages + excluded.messages, dead_letters = c.dead_letters + excluded.dead_letters;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER queue_count_deltas_at_commit AFTER INSERT ON ferry.queue_count_deltas
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ferry.queue_count_deltas_apply();

CREATE OR REPLACE FUNCTION ferry.messages_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    IF current_setting('ferry.counts', true) = 'transaction' THEN
        INSERT INTO ferry.queue_count_deltas (queue_id, messages)
        SELECT queue_id, sign * count(*) FROM changed GROUP BY queue_id;
    ELSE
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages)
        SELECT queue_id, ferry.count_slot(), sign * count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET messages = c.messages + excluded.messages;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION ferry.dead_letters_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    IF current_setting('ferry.counts', true) = 'transaction' THEN
        INSERT INTO ferry.queue_count_deltas (queue_id, dead_letters)
        SELECT queue_id, sign * count(*) FROM changed GROUP BY queue_id;
    ELSE
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, dead_letters)
        SELECT queue_id, ferry.count_slot(), sign * count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET dead_letters = c.dead_letters + excluded.dead_letters;
    END IF;
    RETURN NULL;
END $$;

-- ==== consumers =============================================================

-- ==== producers: send =======================================================

-- ==== producers: publish ====================================================
