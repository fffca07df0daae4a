-- Sections in the reverse order of the up migration.

-- ==== producers: publish ====================================================

-- Events committed through the SQL API but not appended yet are lost with
-- the table (the previous release has no relay): their dedup claims go too.
DELETE FROM ferry.event_dedup WHERE "offset" = -2;
DROP FUNCTION IF EXISTS ferry.publish_batch(text, jsonb);
DROP FUNCTION IF EXISTS ferry.publish(text, text, jsonb, jsonb);
DROP FUNCTION IF EXISTS ferry.publish_events(text, jsonb, boolean);
DROP FUNCTION IF EXISTS ferry.publish_claim(ferry.topics, text[], integer[]);
DROP FUNCTION IF EXISTS ferry.publish_check_fields(jsonb, boolean);
DROP FUNCTION IF EXISTS ferry.publish_check_shape(jsonb, boolean);
DROP FUNCTION IF EXISTS ferry.publish_kind(jsonb);
DROP FUNCTION IF EXISTS ferry.valid_traceparent(text);
DROP FUNCTION IF EXISTS ferry.json_compact_size(jsonb);
DROP FUNCTION IF EXISTS ferry.partition_for_key(text, integer);
DROP SEQUENCE IF EXISTS ferry.event_spread_seq;
DROP SEQUENCE IF EXISTS ferry.event_pending_seq;
DROP TABLE IF EXISTS ferry.event_pending;

-- ==== producers: send =======================================================

DROP FUNCTION IF EXISTS ferry.send_batch(text, jsonb);
DROP FUNCTION IF EXISTS ferry.send(text, jsonb, jsonb);
DROP FUNCTION IF EXISTS ferry.send_write(ferry.queues, ferry.send_columns, integer);
DROP FUNCTION IF EXISTS ferry.send_messages(text, jsonb, boolean);
DROP FUNCTION IF EXISTS ferry.send_admit(ferry.queues, ferry.send_columns);
DROP FUNCTION IF EXISTS ferry.send_plan(ferry.queues, jsonb, boolean);
DROP TYPE IF EXISTS ferry.send_columns;
DROP FUNCTION IF EXISTS ferry.send_check_message(jsonb, integer, boolean, integer);
DROP FUNCTION IF EXISTS ferry.send_valid_time(text);
DROP FUNCTION IF EXISTS ferry.send_check_shape(jsonb, boolean);
DROP FUNCTION IF EXISTS ferry.send_valid_traceparent(text);
DROP FUNCTION IF EXISTS ferry.send_compact_size(jsonb);
DROP FUNCTION IF EXISTS ferry.send_go_string_size(text);
DROP FUNCTION IF EXISTS ferry.send_json_kind(jsonb);
DROP FUNCTION IF EXISTS ferry.send_field(boolean, integer, text);
DROP FUNCTION IF EXISTS ferry.message_send_dedup_live(bigint, text[]);
DROP FUNCTION IF EXISTS ferry.message_send_depth_lock(bigint[]);
DROP FUNCTION IF EXISTS ferry.message_send_dedup_answer(bigint, text[]);
DROP FUNCTION IF EXISTS ferry.message_send_grouped(bigint, text[], text[], text[], text[], bigint[], timestamptz[], integer);
DROP FUNCTION IF EXISTS ferry.message_send_plain(bigint, text[], text[], bigint[], timestamptz[]);

-- ==== consumers =============================================================

DROP FUNCTION IF EXISTS ferry.extend(text, text[], integer);
DROP FUNCTION IF EXISTS ferry.nack(text, text[], jsonb);
DROP FUNCTION IF EXISTS ferry.consumer_nack_options(jsonb);
DROP FUNCTION IF EXISTS ferry.ack(text, text[]);
DROP FUNCTION IF EXISTS ferry.receive(text, integer, integer);
DROP FUNCTION IF EXISTS ferry.consumer_results(text[], bigint[], bigint[], bigint[], bigint[]);
DROP FUNCTION IF EXISTS ferry.consumer_receipts(text[]);
DROP FUNCTION IF EXISTS ferry.consumer_target(text, boolean);
DROP FUNCTION IF EXISTS ferry.consumer_invalid(text[]);
DROP FUNCTION IF EXISTS ferry.receipt_decode(text);
DROP FUNCTION IF EXISTS ferry.receipt_encode(bigint, bigint);
DROP FUNCTION IF EXISTS ferry.message_extend(bigint, bigint[], bigint[], bigint);
DROP FUNCTION IF EXISTS ferry.message_nack(bigint, bigint[], bigint[], boolean, integer, text, bigint, integer, integer);
DROP FUNCTION IF EXISTS ferry.message_ack(bigint, bigint[], bigint[], boolean);
DROP FUNCTION IF EXISTS ferry.message_dead_letter(bigint, bigint[], integer);
DROP FUNCTION IF EXISTS ferry.message_promote(bigint[], text[], bigint[]);
DROP FUNCTION IF EXISTS ferry.message_claim(bigint, integer, integer, bigint, uuid);
DROP FUNCTION IF EXISTS ferry.message_group_lock(bigint, bigint[]);

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
DROP TABLE IF EXISTS ferry.at_commit;
DROP FUNCTION IF EXISTS ferry.at_commit_apply();
DROP FUNCTION IF EXISTS ferry.wake_at_commit(bigint);
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
