-- Depth counters (ferry.queue_counts): per queue, spread over 64 slots.

-- The counter slot of a REST write: the writing backend's (ferry.queue_counts).
CREATE OR REPLACE FUNCTION ferry.count_slot() RETURNS integer LANGUAGE sql STABLE AS
$$ SELECT pg_backend_pid() % 64 $$;

-- The statement-level triggers of ferry.messages and ferry.dead_letters
-- (their CREATE TRIGGERs are migration 000001's): add the statement's
-- rows to the queue's counter slot, or, in a transaction that called
-- ferry.counts_per_transaction, to the transaction's rows of
-- ferry.at_commit (see ferry.counts_per_transaction). A counter row's
-- totals (added, dead_lettered: what came in, for the console's rates;
-- migration 000020) grow by every increase, in the same upsert (migration
-- 000022 dropped the row trigger that did it: one trigger less a send).
CREATE OR REPLACE FUNCTION ferry.messages_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    IF current_setting('ferry.counts', true) = 'transaction' THEN
        INSERT INTO ferry.at_commit (key, messages)
        SELECT queue_id, sign * count(*) FROM changed GROUP BY queue_id;
    ELSE
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages, added)
        SELECT queue_id, ferry.count_slot(), sign * count(*), greatest(sign * count(*), 0)
        FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET messages = c.messages + excluded.messages, added = c.added + excluded.added;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION ferry.dead_letters_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    IF current_setting('ferry.counts', true) = 'transaction' THEN
        INSERT INTO ferry.at_commit (key, dead_letters)
        SELECT queue_id, sign * count(*) FROM changed GROUP BY queue_id;
    ELSE
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, dead_letters, dead_lettered)
        SELECT queue_id, ferry.count_slot(), sign * count(*), greatest(sign * count(*), 0)
        FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE
            SET dead_letters = c.dead_letters + excluded.dead_letters, dead_lettered = c.dead_lettered + excluded.dead_lettered;
    END IF;
    RETURN NULL;
END $$;
