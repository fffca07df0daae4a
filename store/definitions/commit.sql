-- What a caller's transaction does at its commit: its counter changes and
-- its wakes.

-- Depth counters. The triggers of ferry.messages and ferry.dead_letters
-- add to the queue_counts row of the writing backend's slot
-- (pg_backend_pid() % 64) and hold its lock to commit: fine for Ferry's
-- own short transactions, but an application's transaction that sent or
-- acked through the SQL API would stall, until it ends, every REST write
-- to the queue from a backend with the same slot. So a SQL API function
-- calls ferry.counts_per_transaction() before it writes: for the rest of
-- the transaction the triggers add to a counter row of the transaction's
-- own (ferry.count_slot_of_transaction, counters.sql), which no other
-- transaction writes or sees before the commit. One insert a transaction
-- and queue, no work at the commit; the rotator's pass folds the committed
-- rows into slot 128 (ferry.counts_fold). (Generations up to 13 wrote
-- ferry.at_commit rows instead, added up at the commit by
-- ferry.at_commit_apply, which stays for a transaction that wrote them
-- while this generation was installed.)
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
-- The relays' key (store.RelayWakeKey, ferry.publish's) is the other way
-- round: no NOTIFY while some instance's relay is awake, which it says by
-- a row of that key refreshed in the last second (store.Relay: it keeps
-- looking for pending events on its own while it finds some). When it
-- stops looking it deletes the row and waits out the transactions in
-- progress at that commit as a registration does, then looks once more;
-- a relay that died leaves a row that is stale within the second.
CREATE OR REPLACE FUNCTION ferry.wake_at_commit(key bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF key = -9223372036854775806 AND current_setting('transaction_isolation') = 'read committed'
        AND pg_current_xact_id_if_assigned() IS NOT NULL
        AND to_regclass('ferry.wake_waiters') IS NOT NULL THEN
        IF EXISTS (SELECT FROM ferry.wake_waiters w WHERE w.key = wake_at_commit.key
                AND w.registered_at > clock_timestamp() - interval '1 second') THEN
            RETURN;
        END IF;
        PERFORM pg_notify('ferry_messages', key::text);
    ELSIF key <= 0
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

-- At commit, for a transaction that wrote ferry.at_commit rows
-- (definitions generations up to 13, see above): its counter changes,
-- summed per queue, into its slot, in queue order (the lock order of
-- every counter write). The first of the transaction's rows to fire does
-- it all; the others find nothing left. A deferred trigger runs as
-- whoever commits (the application's role, which may not touch Ferry's
-- tables): it runs with Ferry's rights. Its DELETE finds the
-- transaction's rows by the index, whatever plan the session cached
-- while the table was small. The totals grow by the net increase per
-- queue, as in ferry.messages_counted.
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
