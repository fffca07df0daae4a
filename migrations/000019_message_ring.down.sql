-- Back to one table ferry.messages, as migrations 000001 and 000003 made
-- it, with every row (part dropped). The functions are left as they are
-- (TestDownRestoresFunctions), but the definitions of generation 3 write
-- part, which the table no longer has: the installed definitions are
-- recorded as generation 2 of an unknown checksum, so that the next
-- binary of the previous release to start (migrations.Up) installs its
-- own over them.
CREATE TABLE ferry.messages_single (
    queue_id      bigint      NOT NULL,
    id            bigint      NOT NULL,
    visible_at    timestamptz NOT NULL,
    waiting       boolean     NOT NULL DEFAULT false,
    receive_count integer     NOT NULL DEFAULT 0,
    claim_token   bigint,
    sent_at       timestamptz NOT NULL DEFAULT now(),
    grp           text,
    dedup_id      text,
    last_error    text,
    attributes    json,
    body          json        NOT NULL,
    event_id        text,
    event_partition integer,
    event_offset    bigint
) WITH (fillfactor = 90);
ALTER TABLE ferry.messages_single SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
INSERT INTO ferry.messages_single (queue_id, id, visible_at, waiting, receive_count, claim_token, sent_at, grp, dedup_id,
    last_error, attributes, body, event_id, event_partition, event_offset)
SELECT queue_id, id, visible_at, waiting, receive_count, claim_token, sent_at, grp, dedup_id,
    last_error, attributes, body, event_id, event_partition, event_offset
FROM ferry.messages;

DO $$
DECLARE
    -- Absent on a database being made from scratch: the definitions come after the migrations.
    v_fn regprocedure := to_regprocedure('ferry.message_dead_letter_put(bigint, text, text, text, ferry.messages[])');
    v_def text := CASE WHEN v_fn IS NOT NULL THEN pg_get_functiondef(v_fn) END;
BEGIN
    DROP TABLE ferry.messages CASCADE;
    ALTER TABLE ferry.messages_single RENAME TO messages;
    IF v_def IS NOT NULL THEN
        EXECUTE v_def;
        REVOKE ALL ON FUNCTION ferry.message_dead_letter_put(bigint, text, text, text, ferry.messages[]) FROM PUBLIC;
    END IF;
END $$;

ALTER TABLE ferry.messages ADD PRIMARY KEY (queue_id, id);
CREATE INDEX messages_claim_idx ON ferry.messages (queue_id, visible_at, id) WHERE NOT waiting;
CREATE INDEX messages_group_idx ON ferry.messages (queue_id, grp, waiting, id) WHERE grp IS NOT NULL;
CREATE UNIQUE INDEX messages_event_idx ON ferry.messages (queue_id, event_partition, event_offset)
    WHERE event_offset IS NOT NULL;
CREATE TRIGGER messages_inserted AFTER INSERT ON ferry.messages
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION ferry.messages_counted();
CREATE TRIGGER messages_deleted AFTER DELETE ON ferry.messages
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION ferry.messages_counted();

UPDATE ferry.definitions SET generation = 2, checksum = 'replaced by migration 000019 down'
WHERE generation >= 3;

DROP FUNCTION IF EXISTS ferry.messages_refuse_bare_ctid();
