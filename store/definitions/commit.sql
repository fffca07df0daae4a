-- What a caller's transaction does at its commit: its counter changes and
-- its wakes.

-- Depth counters. The triggers of migration 000001 add to the
-- queue_counts row of the writing backend's slot (pg_backend_pid() % 64)
-- and hold its lock to commit: fine for Ferry's own short transactions,
-- but an application's transaction that sent or acked through the SQL API
-- would stall, until it ends, every REST write to the queue from a backend
-- with the same slot. So a SQL API function calls
-- ferry.counts_per_transaction() before it writes: for the rest of the
-- transaction the triggers record their changes in ferry.at_commit
-- instead, which nobody else writes, and they are added up into the slots
-- when the transaction commits: the slot is locked from then to the end
-- of the commit only, as a REST write's is. Those slots are 64..127, apart
-- from REST's 0..63: a REST transaction holds its slot while it waits for
-- a group lock (a send to a group after one to another queue), and a
-- committing SQL API transaction may hold that group's lock, so sharing
-- slots would let the two deadlock. (A caller that runs SET
-- CONSTRAINTS ALL IMMEDIATE applies them at once, and holds the slot from
-- then on.)
CREATE OR REPLACE FUNCTION ferry.counts_per_transaction() RETURNS void LANGUAGE sql AS $$
    SELECT set_config('ferry.counts', 'transaction', true)
$$;
REVOKE ALL ON FUNCTION ferry.counts_per_transaction() FROM PUBLIC;

-- Wakes: a SQL API function that makes messages claimable (or events
-- pending) calls this with the Notifier key; a NOTIFY is delivered to
-- every Ferry instance at the commit, and dropped on rollback. A NOTIFY
-- has a cost: it takes a cluster-wide lock from its commit until its
-- commit record is on disk, so notifying commits wait for each other's
-- fsync (docs/outbox.md has the numbers). So it NOTIFYs only when someone
-- listens for the key: an instance with a long poll parked on the queue
-- registered it in ferry.wake_waiters, or the queue pushes (a Pusher
-- starts its delivery on the NOTIFY), or the key is not a queue's (the
-- relay's, RelayWakeKey: ferry.publish's events always wake the relay).
-- The rows of keys 0 and -1 are no queue's: while no instance of this
-- release listens (no row of key 0: its polls register) or one of an
-- older release does (a row of key -1: its polls do not), every key
-- NOTIFYs.
-- The registration is read in the statement's snapshot, which in READ
-- COMMITTED is taken after this transaction wrote (it has an xid), so a
-- sender that misses a registration was in progress when it committed,
-- and the registering instance waits for exactly those (store/doc.go,
-- "# Wakes"). A transaction snapshot (REPEATABLE READ, SERIALIZABLE) may
-- predate its xid, and a transaction without one cannot be waited for:
-- those always NOTIFY.
-- (Without the table, as after a down of migration 000021, it always
-- NOTIFYs; the subqueries are planned only when reached.)
CREATE OR REPLACE FUNCTION ferry.wake_at_commit(key bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF key <= 0
        OR current_setting('transaction_isolation') <> 'read committed'
        OR pg_current_xact_id_if_assigned() IS NULL
        OR to_regclass('ferry.wake_waiters') IS NULL THEN
        PERFORM pg_notify('ferry_messages', key::text);
    ELSIF NOT EXISTS (SELECT FROM ferry.wake_waiters w WHERE w.key = 0)
        OR EXISTS (SELECT FROM ferry.wake_waiters w WHERE w.key IN (-1, wake_at_commit.key))
        OR EXISTS (SELECT FROM ferry.queues q WHERE q.id = wake_at_commit.key AND q.push_url IS NOT NULL) THEN
        PERFORM pg_notify('ferry_messages', key::text);
    END IF;
END $$;
REVOKE ALL ON FUNCTION ferry.wake_at_commit(bigint) FROM PUBLIC;

-- At commit: the transaction's counter changes, summed per queue, into
-- its slot, in queue order (the lock order of every counter write). The
-- first of the transaction's rows to fire does it all; the others find
-- nothing left. A deferred trigger runs as whoever commits (the
-- application's role, which may not touch Ferry's tables): it runs with
-- Ferry's rights. Its DELETE finds the transaction's rows by the index,
-- whatever plan the session cached while the table was small (a
-- sequential scan would read every dead row a busy table holds). The
-- totals grow by the net increase per queue, as in ferry.messages_counted.
CREATE OR REPLACE FUNCTION ferry.at_commit_apply() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = ferry, pg_temp SET jit = off SET enable_seqscan = off AS $$
BEGIN
    WITH d AS (
        DELETE FROM ferry.at_commit WHERE xact = pg_current_xact_id()
        RETURNING key, messages, dead_letters
    )
    INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages, dead_letters, added, dead_lettered)
    SELECT key, 64 + pg_backend_pid() % 64, sum(messages), sum(dead_letters),
        greatest(sum(messages), 0), greatest(sum(dead_letters), 0)
    FROM d GROUP BY key HAVING sum(messages) <> 0 OR sum(dead_letters) <> 0 ORDER BY key
    ON CONFLICT (queue_id, slot) DO UPDATE
        SET messages = c.messages + excluded.messages, dead_letters = c.dead_letters + excluded.dead_letters,
            added = c.added + excluded.added, dead_lettered = c.dead_lettered + excluded.dead_lettered;
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION ferry.at_commit_apply() FROM PUBLIC;
