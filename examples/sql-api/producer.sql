-- The SQL API's producers from psql, as an application uses them: inside
-- its own transactions. Run against a Ferry database that has a queue
-- named :queue and a topic named :topic (psql_test.go makes them):
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -v queue=jobs -v topic=orders -f producer.sql
--
-- Every check is an ASSERT: the script stops at the first that fails.
\set QUIET on

-- A committed send exists at once; a rolled-back one never did.
BEGIN;
SELECT id AS kept FROM ferry.send(:'queue', '{"n": 1}') \gset
COMMIT;
BEGIN;
SELECT id AS dropped FROM ferry.send(:'queue', '{"n": 2}') \gset
ROLLBACK;
SELECT count(*) = 1 AS ok FROM ferry.receive(:'queue', 10) WHERE id IN (:'kept', :'dropped') AND body = '{"n": 1}' \gset
\if :ok
\else
  \warn 'FAIL: the committed send is received and the rolled-back one is not'
  SELECT 1/0;
\endif

-- A send inside a rolled-back savepoint is gone; the rest of the
-- transaction stays.
BEGIN;
SELECT id AS before FROM ferry.send(:'queue', '{"n": 3}', '{"dedup_id": "sp-before"}') \gset
SAVEPOINT s;
SELECT id AS inside FROM ferry.send(:'queue', '{"n": 4}', '{"dedup_id": "sp-inside"}') \gset
ROLLBACK TO SAVEPOINT s;
COMMIT;
-- The savepoint's dedup id was never claimed: sending it again is fresh.
SELECT NOT duplicate AS ok FROM ferry.send(:'queue', '{"n": 5}', '{"dedup_id": "sp-inside"}') \gset
\if :ok
\else
  \warn 'FAIL: a dedup id sent in a rolled-back savepoint is free again'
  SELECT 1/0;
\endif
SELECT duplicate AND id = :'before' AS ok FROM ferry.send(:'queue', '{"n": 6}', '{"dedup_id": "sp-before"}') \gset
\if :ok
\else
  \warn 'FAIL: the committed dedup id answers its original message'
  SELECT 1/0;
\endif

-- A batch, in order, with a repeat of a dedup id within it.
SELECT array_agg(duplicate ORDER BY ord) = '{f,f,t}' AS ok
FROM ferry.send_batch(:'queue', '[{"body": 1, "dedup_id": "b1"}, {"body": 2}, {"body": 3, "dedup_id": "b1"}]')
    WITH ORDINALITY AS r(id, duplicate, ord) \gset
\if :ok
\else
  \warn 'FAIL: send_batch answers one row per message, in order, the repeat as a duplicate'
  SELECT 1/0;
\endif

-- A publish: id and partition at once; the offset once the transaction
-- committed (the relay appends it within milliseconds).
BEGIN;
SELECT id AS event, "partition" AS part FROM ferry.publish(:'topic', 'order.created', '{"order": 1}', '{"id": "psql-1", "key": "order-1"}') \gset
COMMIT;
BEGIN;
SELECT id AS gone FROM ferry.publish(:'topic', 'order.created', '{"order": 2}', '{"id": "psql-2"}') \gset
ROLLBACK;
DO $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '10 seconds';
BEGIN
    WHILE NOT EXISTS (SELECT 1 FROM ferry.events WHERE id = 'psql-1') LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'FAIL: the committed event was not appended within 10 s';
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
SELECT count(*) = 1 AS ok FROM ferry.events WHERE id IN ('psql-1', 'psql-2') \gset
\if :ok
\else
  \warn 'FAIL: the rolled-back event is not in the log'
  SELECT 1/0;
\endif
SELECT duplicate AND "partition" = :part AS ok FROM ferry.publish(:'topic', 'order.created', '{}', '{"id": "psql-1"}') \gset
\if :ok
\else
  \warn 'FAIL: publishing an id again is a duplicate, with the original partition'
  SELECT 1/0;
\endif

\echo producer.sql: ok
