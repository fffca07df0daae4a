-- Issue 21, "No cliff behind a held snapshot": ferry.messages becomes a
-- table LIST-partitioned by a time slot of its rows, so that the dead rows
-- claims and acks leave lie in partitions that are truncated once they
-- hold nothing live, instead of in front of every claim forever while a
-- long transaction holds the xmin horizon (store/doc.go, # Held snapshots).
--
-- part is the partition: 0..15 the ring (slot of visible_at in 5-second
-- windows, ferry.message_part), 16 COLD (rows forwarded out of a slot
-- about to be reused), 17 FAR (due beyond the horizon, 40 s; the rotator
-- sweeps its rows into the ring as they come due). The routing function
-- is also a definition (store/definitions/message_part.sql), which replaces this
-- text with the same one; it is created here because part's DEFAULT uses
-- it: an INSERT that names no part (an older binary's) lands in the slot
-- of its transaction's now(), which every claim reads, so it is found.
--
-- Rolling deploy: an instance of the previous release keeps working on
-- this table. Its hot paths (claim, ack, nack, extend, send) are the
-- functions of the definitions, which this release installs with this
-- migration; its own Go statements reach rows by (queue_id, id) (the
-- primary key's prefix), insert without part (the DEFAULT), and join no
-- ctid over ferry.messages. One of them is weaker, not wrong on the data
-- it has: a subscription backfill or seek it runs inserts with ON CONFLICT
-- DO NOTHING, which relied on the unique messages_event_idx; that index is
-- not unique any more (a partitioned table's unique index must hold part),
-- so an old instance's seek or subscription creation during the deploy
-- may deliver an event twice to that subscription (docs/operations.md).
--
-- In one transaction: the new table, its partitions, indexes and
-- triggers, the rows copied (the counters are not touched: the triggers
-- are created after the copy), the old table dropped and the new one
-- renamed. ferry.message_dead_letter_put takes ferry.messages[] and goes
-- with the old table, so it is saved and created again over the new one.

CREATE OR REPLACE FUNCTION ferry.message_part(visible_at timestamptz, at timestamptz) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT (CASE WHEN $1 < $2 + interval '40 seconds'
    THEN (floor(extract(epoch FROM greatest($1, $2)) / 5)::bigint % 16) ELSE 17 END)::smallint $$;

CREATE TABLE ferry.messages_parted (
    queue_id        bigint      NOT NULL,
    id              bigint      NOT NULL,
    visible_at      timestamptz NOT NULL,
    waiting         boolean     NOT NULL DEFAULT false,
    receive_count   integer     NOT NULL DEFAULT 0,
    claim_token     bigint,
    sent_at         timestamptz NOT NULL DEFAULT now(),
    grp             text,
    dedup_id        text,
    last_error      text,
    attributes      json,
    body            json        NOT NULL,
    event_id        text,
    event_partition integer,
    event_offset    bigint,
    part            smallint    NOT NULL DEFAULT ferry.message_part(now(), now()),
    PRIMARY KEY (queue_id, id, part)
) PARTITION BY LIST (part);

-- The ring's slots are truncated, never vacuumed: autovacuum off (a
-- vacuum could not remove their dead rows under a held horizon anyway).
DO $$
BEGIN
    FOR s IN 0..15 LOOP
        EXECUTE format('CREATE TABLE ferry.messages_%s PARTITION OF ferry.messages_parted FOR VALUES IN (%s)
            WITH (fillfactor = 90, autovacuum_enabled = false)', lpad(s::text, 2, '0'), s);
    END LOOP;
END $$;
-- COLD and FAR are ordinary tables, vacuumed as ferry.messages was.
CREATE TABLE ferry.messages_cold PARTITION OF ferry.messages_parted FOR VALUES IN (16) WITH (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0);
CREATE TABLE ferry.messages_far PARTITION OF ferry.messages_parted FOR VALUES IN (17) WITH (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0);

INSERT INTO ferry.messages_parted (queue_id, id, visible_at, waiting, receive_count, claim_token, sent_at, grp, dedup_id,
    last_error, attributes, body, event_id, event_partition, event_offset, part)
SELECT queue_id, id, visible_at, waiting, receive_count, claim_token, sent_at, grp, dedup_id,
    last_error, attributes, body, event_id, event_partition, event_offset, ferry.message_part(visible_at, now())
FROM ferry.messages;

-- The indexes of ferry.messages, on every partition; the event index is
-- no longer unique (backfill and seek probe before they insert, under the
-- topic's partition locks). FAR's own index finds its due rows.
CREATE INDEX messages_parted_claim_idx ON ferry.messages_parted (queue_id, visible_at, id) WHERE NOT waiting;
CREATE INDEX messages_parted_group_idx ON ferry.messages_parted (queue_id, grp, waiting, id) WHERE grp IS NOT NULL;
CREATE INDEX messages_parted_event_idx ON ferry.messages_parted (queue_id, event_partition, event_offset)
    WHERE event_offset IS NOT NULL;
CREATE INDEX messages_far_due_idx ON ferry.messages_far (visible_at);

-- The previous release's claim and promotion join rows by a bare ctid,
-- which on a partitioned table can name rows of other queues in other
-- partitions. An instance of that release calls them between this
-- migration's commit and the install of this release's definitions
-- (moments later, in the same `migrate up`): dropped here, such a call
-- fails until the new ones exist, instead of claiming another queue's rows.
DROP FUNCTION IF EXISTS ferry.message_claim(bigint, integer, integer, bigint, uuid);
DROP FUNCTION IF EXISTS ferry.message_promote(bigint[], text[], bigint[]);

DO $$
DECLARE
    -- Absent on a database being made from scratch: the definitions come after the migrations.
    v_fn regprocedure := to_regprocedure('ferry.message_dead_letter_put(bigint, text, text, text, ferry.messages[])');
    v_def text := CASE WHEN v_fn IS NOT NULL THEN pg_get_functiondef(v_fn) END;
BEGIN
    DROP TABLE ferry.messages CASCADE;
    ALTER TABLE ferry.messages_parted RENAME TO messages;
    ALTER INDEX ferry.messages_parted_pkey RENAME TO messages_pkey;
    ALTER INDEX ferry.messages_parted_claim_idx RENAME TO messages_claim_idx;
    ALTER INDEX ferry.messages_parted_group_idx RENAME TO messages_group_idx;
    ALTER INDEX ferry.messages_parted_event_idx RENAME TO messages_event_idx;
    IF v_def IS NOT NULL THEN
        EXECUTE v_def;
        REVOKE ALL ON FUNCTION ferry.message_dead_letter_put(bigint, text, text, text, ferry.messages[]) FROM PUBLIC;
    END IF;
END $$;

CREATE TRIGGER messages_inserted AFTER INSERT ON ferry.messages
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION ferry.messages_counted();
CREATE TRIGGER messages_deleted AFTER DELETE ON ferry.messages
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION ferry.messages_counted();

-- The previous release's cleanup of a deleted queue (store.QueueDeleteContent,
-- a River job any of its instances may run during a rolling deploy) deletes
-- by a bare ctid too, which here could delete live rows of other queues.
-- Its statement carries the tag ferry:queue_delete_messages; this release's
-- says ferry:queue_content_delete_messages. A statement carrying the old
-- tag is refused (the job retries, and an instance of this release does
-- the work). The WHEN clause is evaluated without calling the function,
-- so another DELETE pays a look at its own text. A later release, once no
-- instance of the previous one can be left, drops this trigger.
CREATE FUNCTION ferry.messages_refuse_bare_ctid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ferry: a release before migration 000019 cannot delete a queue''s content from the partitioned ferry.messages; an instance of a later release will'
        USING ERRCODE = 'feature_not_supported';
END $$;
REVOKE ALL ON FUNCTION ferry.messages_refuse_bare_ctid() FROM PUBLIC;
CREATE TRIGGER messages_refuse_bare_ctid BEFORE DELETE ON ferry.messages FOR EACH STATEMENT
    WHEN (position('ferry:queue_delete_messages */' IN current_query()) > 0)
    EXECUTE FUNCTION ferry.messages_refuse_bare_ctid();
