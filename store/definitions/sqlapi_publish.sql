-- A SQL publish cannot hold its partitions' row locks until the caller
-- commits (the caller's transaction may stay open for minutes, and every
-- publish to those partitions would wait for it). So ferry.publish only
-- validates, chooses each event's id and partition, claims the id in
-- ferry.event_dedup (offset -2: committed but not appended yet) and
-- records the event in ferry.event_pending (migration 000009), in the
-- caller's transaction; its NOTIFY, which the commit delivers, wakes the
-- outbox relay of every Ferry instance (store.Relay), which appends
-- committed pending events to the log in seq order, per topic one instance at a time, through the publish engine
-- REST uses (fan-out included), deleting them in the same transaction.
-- No foreign key to ferry.topics: it would have the caller's transaction
-- hold a lock on the topic's row to its end; the relay drops the events
-- of a topic that is gone.

-- The shape of a publish's events, as REST's decoder checks it: an array
-- of objects with only the members id, type, key, data, attributes (or,
-- for ferry.publish, options with id, key, attributes), each of its
-- type. Raises FR400 at the first mistake, FR413 over max_batch events;
-- returns events. Members are named as REST names them, with the event's
-- index where REST's decoder cannot give it ("events[3].type: must be a
-- string"). An event that breaks no rule (the usual one) costs no
-- statement.
CREATE OR REPLACE FUNCTION ferry.publish_check_shape(events jsonb, single boolean, max_batch integer) RETURNS jsonb
    LANGUAGE plpgsql AS $$
DECLARE
    e jsonb;
    k text;
    v jsonb;
    f text;
BEGIN
    IF events IS NULL OR jsonb_typeof(events) = 'null' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'events: is required');
    ELSIF jsonb_typeof(events) <> 'array' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'events: must be an array, not ' || ferry.json_kind(events));
    ELSIF jsonb_array_length(events) = 0 THEN
        PERFORM ferry.raise(400, 'invalid_request', 'events: must not be empty');
    ELSIF jsonb_array_length(events) > max_batch THEN
        PERFORM ferry.raise(413, 'payload_too_large',
            format('a batch holds at most %s events, not %s', max_batch, jsonb_array_length(events)));
    END IF;
    FOR i IN 0 .. jsonb_array_length(events) - 1 LOOP
        e := events -> i;
        -- Only whether no rule below applies (no statement): then the
        -- next event. The usual one goes no further.
        CONTINUE WHEN jsonb_typeof(e) = 'object'
            AND e - ARRAY['id', 'type', 'key', 'data', 'attributes'] = '{}'
            AND coalesce(jsonb_typeof(e -> 'id'), 'null') IN ('string', 'null')
            AND coalesce(jsonb_typeof(e -> 'type'), 'null') IN ('string', 'null')
            AND coalesce(jsonb_typeof(e -> 'key'), 'null') IN ('string', 'null')
            AND (coalesce(jsonb_typeof(e -> 'attributes'), 'null') = 'null'
                OR jsonb_typeof(e -> 'attributes') = 'object'
                    AND NOT jsonb_path_exists(e -> 'attributes', 'strict $.* ? (@.type() != "string" && @.type() != "null")'));
        IF jsonb_typeof(e) <> 'object' THEN
            PERFORM ferry.raise(400, 'invalid_request',
                CASE WHEN single THEN 'options' ELSE format('events[%s]', i) END
                || ': must be an object, not ' || ferry.json_kind(e));
        END IF;
        FOR k, v IN SELECT * FROM jsonb_each(e) LOOP
            f := CASE WHEN single THEN k ELSE format('events[%s].%s', i, k) END;
            IF k NOT IN ('id', 'type', 'key', 'data', 'attributes') THEN
                PERFORM ferry.raise(400, 'invalid_request', f || ': unknown field (member names are case-sensitive)');
            ELSIF k IN ('id', 'type', 'key') AND jsonb_typeof(v) NOT IN ('string', 'null') THEN
                PERFORM ferry.raise(400, 'invalid_request', f || ': must be a string, not ' || ferry.json_kind(v));
            ELSIF k = 'attributes' AND jsonb_typeof(v) NOT IN ('object', 'null') THEN
                PERFORM ferry.raise(400, 'invalid_request', f || ': must be an object, not ' || ferry.json_kind(v));
            ELSIF k = 'attributes' AND jsonb_typeof(v) = 'object' THEN
                SELECT a.key INTO k FROM jsonb_each(v) a WHERE jsonb_typeof(a.value) NOT IN ('string', 'null') ORDER BY a.key LIMIT 1;
                IF FOUND THEN
                    PERFORM ferry.raise(400, 'invalid_request', format('%s: must be a string, not %s',
                        f, ferry.json_kind(v -> k)));
                END IF;
            END IF;
        END LOOP;
    END LOOP;
    RETURN events;
END $$;
REVOKE ALL ON FUNCTION ferry.publish_check_shape(jsonb, boolean, integer) FROM PUBLIC;

-- ferry.publish_check_shape with the configured batch limit, kept with
-- its signature (TestSignaturesKept); ferry.publish_events calls the one
-- above with the limits it read.
CREATE OR REPLACE FUNCTION ferry.publish_check_shape(events jsonb, single boolean) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ferry.publish_check_shape(events, single, (SELECT l.max_batch FROM ferry.sql_limits l));
END $$;
REVOKE ALL ON FUNCTION ferry.publish_check_shape(jsonb, boolean) FROM PUBLIC;

-- The field checks of a publish's events, as REST's (handlers' toPublishEvents):
-- id, type and key 1-256 bytes of text (type required),
-- attributes' keys 1-256 bytes and values at most 4096, a valid
-- traceparent, and data with attributes within max_body bytes (FR413 at
-- the first event over it). Every mistake is collected, and the first
-- named, as REST does. Returns events. Statements only for attributes.
CREATE OR REPLACE FUNCTION ferry.publish_check_fields(events jsonb, single boolean, max_body integer) RETURNS jsonb
    LANGUAGE plpgsql AS $$
DECLARE
    e jsonb;
    name text;
    item text;
    attrs jsonb;
    data_bytes bigint;
    attrs_size bigint;
    size bigint;
    errs text[] := '{}';
BEGIN
    FOR i IN 0 .. jsonb_array_length(events) - 1 LOOP
        e := events -> i;
        item := CASE WHEN single THEN '' ELSE format('events[%s].', i) END;
        data_bytes := coalesce(octet_length(nullif(e -> 'data', 'null')::text), 0);
        IF ferry.json_too_deep(e -> 'data', data_bytes) THEN
            PERFORM ferry.raise(400, 'invalid_request', item || 'data: must not nest deeper than ' || ferry.max_value_depth() || ' levels');
        END IF;
        FOREACH name IN ARRAY ARRAY['id', 'type', 'key'] LOOP
            IF jsonb_typeof(e -> name) IS DISTINCT FROM 'string' THEN
                IF name = 'type' THEN
                    errs := errs || (item || 'type: is required');
                END IF;
            ELSIF (e ->> name) = '' OR octet_length(e ->> name) > 256 THEN
                errs := errs || (item || name || ': must be 1-256 bytes of text');
            END IF;
        END LOOP;
        attrs := CASE WHEN jsonb_typeof(e -> 'attributes') = 'object' AND e -> 'attributes' <> '{}' THEN e -> 'attributes' END;
        attrs_size := 0;
        IF attrs IS NOT NULL THEN
            IF EXISTS (SELECT 1 FROM jsonb_each_text(attrs) a
                    WHERE a.key = '' OR octet_length(a.key) > 256 OR octet_length(a.value) > 4096) THEN
                errs := errs || (item || 'attributes: keys must be 1-256 bytes and values at most 4096 bytes of text');
            END IF;
            IF attrs ? 'traceparent' AND NOT ferry.valid_traceparent(coalesce(attrs ->> 'traceparent', '')) THEN
                errs := errs || (item || 'attributes.traceparent: must be a W3C trace context traceparent: '
                    || '00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zeros');
            END IF;
            attrs_size := ferry.attributes_size(attrs);
        END IF;
        size := data_bytes + attrs_size;
        IF size > max_body THEN
            size := coalesce(ferry.json_compact_size(nullif(e -> 'data', 'null')), 0) + attrs_size;
            IF size > max_body THEN
                PERFORM ferry.raise(413, 'payload_too_large', format('%s: data and attributes are %s bytes; the limit is %s',
                    CASE WHEN single THEN 'event' ELSE format('events[%s]', i) END, size, max_body));
            END IF;
        END IF;
    END LOOP;
    IF cardinality(errs) = 1 THEN
        PERFORM ferry.raise(400, 'invalid_request', errs[1]);
    ELSIF cardinality(errs) > 1 THEN
        PERFORM ferry.raise(400, 'invalid_request', format('%s invalid fields; first: %s', cardinality(errs), errs[1]));
    END IF;
    RETURN events;
END $$;
REVOKE ALL ON FUNCTION ferry.publish_check_fields(jsonb, boolean, integer) FROM PUBLIC;

-- ferry.publish_check_fields with the configured body limit, kept with
-- its signature (TestSignaturesKept), as ferry.publish_check_shape.
CREATE OR REPLACE FUNCTION ferry.publish_check_fields(events jsonb, single boolean) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ferry.publish_check_fields(events, single, (SELECT l.max_body_bytes FROM ferry.sql_limits l));
END $$;
REVOKE ALL ON FUNCTION ferry.publish_check_fields(jsonb, boolean) FROM PUBLIC;

-- A publish in the caller's transaction (ferry.publish, ferry.publish_batch):
-- checks the events as REST does, gives each its id (evt_ + 32 hex
-- digits when it has none) and partition (by key, or spread), claims the
-- ids of the topic's dedup window (an id claimed in the window, or earlier
-- in the batch or the transaction, is a duplicate and answers the
-- original's partition), records the fresh events in ferry.event_pending
-- in order, and wakes the relays at commit. It waits only for another
-- producer of the same event id (to learn whether that one commits); it
-- leaves no lock that anyone else needs until the caller commits.
-- Statements: the limits with the topic, the claim, the pending rows,
-- the wake; more only for attributes, mistakes and duplicates.
CREATE OR REPLACE FUNCTION ferry.publish_events(topic_name text, events jsonb, single boolean)
    RETURNS TABLE(id text, "partition" integer, duplicate boolean)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r record;
    t ferry.topics%ROWTYPE;
    n integer;
    e jsonb;
    ids text[] := '{}';
    parts integer[] := '{}';
    spread bigint;
    claimed text[];
    fresh boolean[];
BEGIN
    IF topic_name IS NULL OR topic_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'topic: must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$');
    END IF;
    -- One read: the limits, and the topic (NULLs if there is none; its
    -- 404 comes after the events' mistakes, as REST's).
    SELECT l.max_batch, l.max_body_bytes, tp AS topic INTO r
    FROM ferry.sql_limits l LEFT JOIN ferry.topics tp ON tp.name = topic_name;
    events := ferry.publish_check_fields(ferry.publish_check_shape(events, single, r.max_batch), single, r.max_body_bytes);
    t := r.topic;
    IF t.id IS NULL THEN
        PERFORM ferry.raise(404, 'not_found', 'no such resource');
    END IF;
    -- Ids and partitions, by index (no statement): keyed by the key's
    -- hash, keyless from the spread sequence (one draw per call, by the
    -- first keyless event; the next ones take the following numbers).
    n := jsonb_array_length(events);
    FOR i IN 1 .. n LOOP
        e := events -> (i - 1);
        ids[i] := coalesce(e ->> 'id', 'evt_' || replace(gen_random_uuid()::text, '-', ''));
        IF e ->> 'key' IS NOT NULL THEN
            parts[i] := ferry.partition_for_key(e ->> 'key', t.partitions);
        ELSE
            spread := CASE WHEN spread IS NULL THEN nextval('ferry.event_spread_seq') ELSE spread + 1 END;
            parts[i] := (spread % t.partitions)::integer;
        END IF;
    END LOOP;
    claimed := ferry.publish_claim(t, ids, parts);
    -- Which events are fresh: the first of each id claimed now. As many
    -- claimed as events: every one (the usual publish, no statement).
    IF cardinality(claimed) = n THEN
        fresh := array_fill(true, ARRAY[n]);
    ELSE
        fresh := ARRAY(SELECT u.id = ANY(claimed) AND u.ord = min(u.ord) OVER (PARTITION BY u.id)
            FROM unnest(ids) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord);
    END IF;
    IF cardinality(claimed) > 0 THEN
        -- The fresh events, in order.
        INSERT INTO ferry.event_pending (seq, topic_id, partition, id, type, key, data, attributes)
        SELECT nextval('ferry.event_pending_seq'), t.id, f.p, f.id, f.e ->> 'type', f.e ->> 'key',
            nullif(f.e -> 'data', 'null'),
            CASE WHEN jsonb_typeof(f.e -> 'attributes') = 'object' AND f.e -> 'attributes' <> '{}' THEN
                -- A null value is "", as REST decodes it.
                (SELECT jsonb_object_agg(a.key, coalesce(a.value, '')) FROM jsonb_each_text(f.e -> 'attributes') AS a) END
        FROM (
            SELECT u.id, u.p, u.ord, events -> (u.ord::integer - 1) AS e
            FROM unnest(ids, parts, fresh) WITH ORDINALITY AS u(id, p, keep, ord)
            WHERE u.keep
            ORDER BY u.ord
        ) f;
        -- store.RelayWakeKey: heard by every relay at commit.
        PERFORM ferry.wake_at_commit(-9223372036854775806);
    END IF;
    IF cardinality(claimed) = n THEN
        FOR i IN 1 .. n LOOP
            id := ids[i];
            "partition" := parts[i];
            duplicate := false;
            RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;
    -- A duplicate answers its original's partition: one probe each (a
    -- fresh event's is the one computed above); one whose claim has gone
    -- meanwhile has no row, as when every event was probed.
    RETURN QUERY
        SELECT u.id, CASE WHEN u.keep THEN u.p ELSE d.partition END, NOT u.keep
        FROM unnest(ids, parts, fresh) WITH ORDINALITY AS u(id, p, keep, ord)
        LEFT JOIN LATERAL (
            SELECT x.partition FROM ferry.event_dedup x WHERE NOT u.keep AND x.topic_id = t.id AND x.event_id = u.id LIMIT 1
        ) d ON true
        WHERE u.keep OR d.partition IS NOT NULL
        ORDER BY u.ord;
END $$;
REVOKE ALL ON FUNCTION ferry.publish_events(text, jsonb, boolean) FROM PUBLIC;

-- Claims the ids (with their partitions) for topic t as pending (offset
-- -2, no expiry until the relay appends them) and returns those claimed
-- now. An id already claimed is a duplicate: its row is not touched, so
-- not locked (the relay must be able to append it while this caller's
-- transaction is open), unless its window has ended, and then it is
-- taken over. An insert that meets another producer's uncommitted claim
-- of the same id waits for it.
CREATE OR REPLACE FUNCTION ferry.publish_claim(t ferry.topics, ids text[], parts integer[]) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    fresh text[];
    taken text[];
BEGIN
    WITH firsts AS (
        SELECT DISTINCT ON (u.id) u.id, u.p FROM unnest(ids, parts) WITH ORDINALITY AS u(id, p, ord) ORDER BY u.id, u.ord
    ), ins AS (
        INSERT INTO ferry.event_dedup AS d (topic_id, event_id, partition, "offset", expires_at)
        SELECT t.id, f.id, f.p, -2, 'infinity' FROM firsts f ORDER BY f.id
        ON CONFLICT (topic_id, event_id) DO NOTHING
        RETURNING d.event_id
    )
    SELECT coalesce(array_agg(ins.event_id), '{}') INTO fresh FROM ins;
    -- Every id fresh: as many as ids (no statement), or as many as
    -- distinct ids when some repeats.
    IF cardinality(fresh) = cardinality(ids) THEN
        RETURN fresh;
    ELSIF cardinality(fresh) > 0 AND cardinality(fresh) = cardinality(ARRAY(SELECT DISTINCT unnest(ids))) THEN
        RETURN fresh;
    END IF;
    -- One probe per id by the whole key, then by ctid (see
    -- ferry:event_dedup_read).
    WITH firsts AS (
        SELECT DISTINCT ON (u.id) u.id, u.p FROM unnest(ids, parts) WITH ORDINALITY AS u(id, p, ord)
        WHERE NOT (u.id = ANY(fresh)) ORDER BY u.id, u.ord
    ), upd AS (
        UPDATE ferry.event_dedup d SET partition = f.p, "offset" = -2, expires_at = 'infinity'
        FROM firsts f CROSS JOIN LATERAL (
            SELECT x.ctid FROM ferry.event_dedup x WHERE x.topic_id = t.id AND x.event_id = f.id LIMIT 1
        ) x
        WHERE d.ctid = x.ctid AND d.expires_at <= now()
        RETURNING d.event_id
    )
    SELECT coalesce(array_agg(upd.event_id), '{}') INTO taken FROM upd;
    RETURN fresh || taken;
END $$;
REVOKE ALL ON FUNCTION ferry.publish_claim(ferry.topics, text[], integer[]) FROM PUBLIC;

-- Publishes one event to topic in the caller's transaction: options id,
-- key, attributes. Its offset is assigned when the transaction commits
-- (API.md § SQL API). Waits only for another producer of the same event
-- id.
CREATE OR REPLACE FUNCTION ferry.publish(topic text, type text, data jsonb, options jsonb DEFAULT '{}')
    RETURNS TABLE(id text, "partition" integer, duplicate boolean)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
BEGIN
    IF options IS NULL OR jsonb_typeof(options) = 'null' THEN
        options := '{}';
    ELSIF jsonb_typeof(options) <> 'object' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'options: must be an object, not ' || ferry.json_kind(options));
    END IF;
    IF options ?| ARRAY['type', 'data'] THEN
        PERFORM ferry.raise(400, 'invalid_request',
            (CASE WHEN options ? 'data' THEN 'data' ELSE 'type' END) || ': unknown field (member names are case-sensitive)');
    END IF;
    RETURN QUERY SELECT * FROM ferry.publish_events(topic,
        jsonb_build_array(options || jsonb_build_object('type', type, 'data', data)), true);
END $$;
REVOKE ALL ON FUNCTION ferry.publish(text, text, jsonb, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.publish(text, text, jsonb, jsonb) TO ferry_producer;

-- Publishes events (the REST events array) to topic in the caller's
-- transaction, one row per event in order. As ferry.publish.
CREATE OR REPLACE FUNCTION ferry.publish_batch(topic text, events jsonb)
    RETURNS TABLE(id text, "partition" integer, duplicate boolean)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM ferry.publish_events(topic, events, false);
END $$;
REVOKE ALL ON FUNCTION ferry.publish_batch(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.publish_batch(text, jsonb) TO ferry_producer;
