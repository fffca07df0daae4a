-- Depth counters (ferry.queue_counts): per queue, spread over 64 slots.

-- The counter slot of a REST write: the writing backend's (ferry.queue_counts).
CREATE OR REPLACE FUNCTION ferry.count_slot() RETURNS integer LANGUAGE sql STABLE AS
$$ SELECT pg_backend_pid() % 64 $$;

-- The counter row of a transaction that called
-- ferry.counts_per_transaction (the SQL API's): a slot below zero that is
-- the transaction's own, from its id, so nobody else writes the row
-- (the ids of two transactions open at once are less than 2^31 apart).
-- ferry.counts_fold adds such rows, once committed, into slot 128.
CREATE OR REPLACE FUNCTION ferry.count_slot_of_transaction() RETURNS integer LANGUAGE sql VOLATILE AS
$$ SELECT (-1 - pg_current_xact_id()::text::bigint % 2147483647)::integer $$;
REVOKE ALL ON FUNCTION ferry.count_slot_of_transaction() FROM PUBLIC;

-- The statement-level triggers of ferry.messages and ferry.dead_letters
-- (their CREATE TRIGGERs are migration 000001's): add the statement's
-- rows to the queue's counter slot, or, in a transaction that called
-- ferry.counts_per_transaction, to the transaction's own counter row
-- (ferry.count_slot_of_transaction), which nobody else writes: an
-- application that holds its transaction open after a SQL API call
-- keeps no one waiting for a counter row. A counter row's totals (added,
-- dead_lettered: what came in, for the console's rates; migration 000020)
-- grow by every increase, in the same upsert (migration 000022 dropped
-- the row trigger that did it: one trigger less a send).
CREATE OR REPLACE FUNCTION ferry.messages_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    IF current_setting('ferry.counts', true) = 'transaction' THEN
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages, added)
        SELECT queue_id, ferry.count_slot_of_transaction(), sign * count(*), greatest(sign * count(*), 0)
        FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET messages = c.messages + excluded.messages, added = c.added + excluded.added;
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
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, dead_letters, dead_lettered)
        SELECT queue_id, ferry.count_slot_of_transaction(), sign * count(*), greatest(sign * count(*), 0)
        FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE
            SET dead_letters = c.dead_letters + excluded.dead_letters, dead_lettered = c.dead_lettered + excluded.dead_lettered;
    ELSE
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, dead_letters, dead_lettered)
        SELECT queue_id, ferry.count_slot(), sign * count(*), greatest(sign * count(*), 0)
        FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE
            SET dead_letters = c.dead_letters + excluded.dead_letters, dead_lettered = c.dead_lettered + excluded.dead_lettered;
    END IF;
    RETURN NULL;
END $$;

-- The fold of the transactions' counter rows (ferry.count_slot_of_transaction):
-- up to p_limit committed ones are deleted and their sums added, per
-- queue in queue order, into the queue's slot 128, which only the fold
-- writes. Rows of transactions still open are not seen, and none is
-- waited for (SKIP LOCKED: a second fold running at once takes others).
-- The sums over a queue's rows stay the same throughout. Returns how many
-- rows it folded. The rows are found by their partial index (migration
-- 000023), whatever the plan.
CREATE OR REPLACE FUNCTION ferry.counts_fold(p_limit integer) RETURNS bigint LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    n bigint;
BEGIN
    WITH /* ferry:counts_fold */ d AS (
        DELETE FROM ferry.queue_counts c
        WHERE (c.queue_id, c.slot) IN (
            SELECT x.queue_id, x.slot FROM ferry.queue_counts x WHERE x.slot < 0
            ORDER BY x.queue_id, x.slot LIMIT p_limit FOR UPDATE SKIP LOCKED)
        RETURNING c.queue_id, c.messages, c.dead_letters, c.added, c.dead_lettered
    ),
    s AS (
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages, dead_letters, added, dead_lettered)
        SELECT d.queue_id, 128, sum(d.messages), sum(d.dead_letters), sum(d.added), sum(d.dead_lettered)
        FROM d GROUP BY d.queue_id ORDER BY d.queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE
            SET messages = c.messages + excluded.messages, dead_letters = c.dead_letters + excluded.dead_letters,
                added = c.added + excluded.added, dead_lettered = c.dead_lettered + excluded.dead_lettered
        RETURNING 1
    )
    SELECT count(*) INTO n FROM d;
    RETURN n;
END $$;
REVOKE ALL ON FUNCTION ferry.counts_fold(integer) FROM PUBLIC;
