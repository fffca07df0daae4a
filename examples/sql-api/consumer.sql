-- The SQL API's consumers from psql: receive, do the work, ack, in one
-- transaction. Run like producer.sql, with an empty :queue.
\set QUIET on

CREATE TEMP TABLE done (n int PRIMARY KEY);
SELECT count(*) = 3 AS ok FROM ferry.send_batch(:'queue', '[{"body": 1}, {"body": 2}, {"body": 3}]') \gset

-- A consumer that rolls back (or dies before its commit) undoes its
-- receive with its work: the messages are available again at once, their
-- receive_count unchanged (the lease was never committed).
BEGIN;
INSERT INTO done SELECT (body #>> '{}')::int FROM ferry.receive(:'queue', 10, 30);
ROLLBACK;

-- Work and ack commit together: each message's effect exactly once.
BEGIN;
CREATE TEMP TABLE got ON COMMIT DROP AS SELECT * FROM ferry.receive(:'queue', 10, 30);
SELECT count(*) = 3 AND bool_and(receive_count = 1) AS fresh FROM got \gset
INSERT INTO done SELECT (body #>> '{}')::int FROM got;
SELECT count(*) = 3 AND bool_and(status = 'ok') AS ok FROM ferry.ack(:'queue', (SELECT array_agg(receipt) FROM got)) \gset
COMMIT;
\if :fresh
\else
  \warn 'FAIL: after the rollback the three messages are received again at once, as never received'
  SELECT 1/0;
\endif
\if :ok
\else
  \warn 'FAIL: the three messages are acked'
  SELECT 1/0;
\endif
SELECT (SELECT count(*) FROM done) = 3 AND (SELECT count(*) FROM ferry.receive(:'queue', 10)) = 0 AS ok \gset
\if :ok
\else
  \warn 'FAIL: the work is done once and the queue is empty'
  SELECT 1/0;
\endif

-- A stale receipt changes nothing: an ack of an acked message is stale.
SELECT ferry.send(:'queue', '"again"') \g /dev/null
BEGIN;
SELECT receipt AS r FROM ferry.receive(:'queue', 1, 30) \gset
SELECT status = 'ok' AS ok FROM ferry.ack(:'queue', ARRAY[:'r']) \gset
COMMIT;
SELECT status = 'stale' AS ok2 FROM ferry.ack(:'queue', ARRAY[:'r']) \gset
\if :ok2
\else
  \warn 'FAIL: acking twice: the second ack is stale'
  SELECT 1/0;
\endif

\echo consumer.sql: ok
