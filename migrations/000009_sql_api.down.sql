-- Sections in the reverse order of the up migration.

-- ==== producers: publish ====================================================

-- ==== producers: send =======================================================

-- ==== consumers =============================================================

-- ==== common ================================================================

-- The counter triggers as 000001 made them.
CREATE OR REPLACE FUNCTION ferry.messages_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages)
        SELECT queue_id, ferry.count_slot(), count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET messages = c.messages + excluded.messages;
    ELSE
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages)
        SELECT queue_id, ferry.count_slot(), -count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET messages = c.messages + excluded.messages;
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION ferry.dead_letters_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, dead_letters)
        SELECT queue_id, ferry.count_slot(), count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET dead_letters = c.dead_letters + excluded.dead_letters;
    ELSE
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, dead_letters)
        SELECT queue_id, ferry.count_slot(), -count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET dead_letters = c.dead_letters + excluded.dead_letters;
    END IF;
    RETURN NULL;
END $$;
DROP TABLE IF EXISTS ferry.queue_count_deltas;
DROP FUNCTION IF EXISTS ferry.queue_count_deltas_apply();
DROP FUNCTION IF EXISTS ferry.counts_per_transaction();
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
