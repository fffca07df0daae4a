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
-- type. Raises FR400 at the first mistake, FR413 over the batch limit.
-- Members are named as REST names them, with the event's index where
-- REST's decoder cannot give it ("events[3].type: must be a string").
CREATE OR REPLACE FUNCTION ferry.publish_check_shape(events jsonb, single boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    max_batch integer := (SELECT l.max_batch FROM ferry.sql_limits l);
    e jsonb;
    i integer;
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
    FOR e, i IN SELECT x.e, x.i - 1 FROM jsonb_array_elements(events) WITH ORDINALITY AS x(e, i) LOOP
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
END $$;
REVOKE ALL ON FUNCTION ferry.publish_check_shape(jsonb, boolean) FROM PUBLIC;

-- The field checks of a publish's events, as REST's (handlers' toPublishEvents):
-- id, type and key 1-256 bytes of text (type required),
-- attributes' keys 1-256 bytes and values at most 4096, a valid
-- traceparent, and data with attributes within the body limit (FR413 at
-- the first event over it). Every mistake is collected, and the first
-- named, as REST does.
CREATE OR REPLACE FUNCTION ferry.publish_check_fields(events jsonb, single boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    max_body integer := (SELECT l.max_body_bytes FROM ferry.sql_limits l);
    e jsonb;
    i integer;
    name text;
    item text;
    attrs jsonb;
    data_bytes bigint;
    attrs_size bigint;
    size bigint;
    errs text[] := '{}';
BEGIN
    FOR e, i IN SELECT x.e, x.i - 1 FROM jsonb_array_elements(events) WITH ORDINALITY AS x(e, i) LOOP
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
        IF attrs IS NOT NULL THEN
            IF EXISTS (SELECT 1 FROM jsonb_each_text(attrs) a
                    WHERE a.key = '' OR octet_length(a.key) > 256 OR octet_length(a.value) > 4096) THEN
                errs := errs || (item || 'attributes: keys must be 1-256 bytes and values at most 4096 bytes of text');
            END IF;
            IF attrs ? 'traceparent' AND NOT ferry.valid_traceparent(coalesce(attrs ->> 'traceparent', '')) THEN
                errs := errs || (item || 'attributes.traceparent: must be a W3C trace context traceparent: '
                    || '00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zeros');
            END IF;
        END IF;
        attrs_size := coalesce(ferry.attributes_size(attrs), 0);
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
CREATE OR REPLACE FUNCTION ferry.publish_events(topic_name text, events jsonb, single boolean)
    RETURNS TABLE(id text, "partition" integer, duplicate boolean)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    t ferry.topics%ROWTYPE;
    ids text[];
    parts integer[];
    claimed text[];
BEGIN
    IF topic_name IS NULL OR topic_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'topic: must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$');
    END IF;
    PERFORM ferry.publish_check_shape(events, single);
    PERFORM ferry.publish_check_fields(events, single);
    SELECT * INTO t FROM ferry.topics WHERE name = topic_name;
    IF NOT FOUND THEN
        PERFORM ferry.raise(404, 'not_found', 'no such resource');
    END IF;
    -- Ids, then partitions: keyed by the key's hash, keyless from the
    -- spread sequence (one draw per call).
    SELECT array_agg(coalesce(x.e ->> 'id', 'evt_' || replace(gen_random_uuid()::text, '-', '')) ORDER BY x.i)
    INTO ids FROM jsonb_array_elements(events) WITH ORDINALITY AS x(e, i);
    WITH ev AS (
        SELECT x.i, x.e ->> 'key' AS key, count(*) FILTER (WHERE x.e ->> 'key' IS NULL) OVER (ORDER BY x.i) AS k
        FROM jsonb_array_elements(events) WITH ORDINALITY AS x(e, i)
    ), base AS (SELECT CASE WHEN EXISTS (SELECT 1 FROM ev WHERE key IS NULL) THEN nextval('ferry.event_spread_seq') END AS b)
    SELECT array_agg(CASE WHEN ev.key IS NOT NULL THEN ferry.partition_for_key(ev.key, t.partitions)
        ELSE ((base.b + ev.k - 1) % t.partitions)::integer END ORDER BY ev.i)
    INTO parts FROM ev, base;
    claimed := ferry.publish_claim(t, ids, parts);
    -- The fresh events (the first of each id claimed now), in order.
    INSERT INTO ferry.event_pending (seq, topic_id, partition, id, type, key, data, attributes)
    SELECT nextval('ferry.event_pending_seq'), t.id, f.p, f.id, f.e ->> 'type', f.e ->> 'key',
        nullif(f.e -> 'data', 'null'),
        CASE WHEN jsonb_typeof(f.e -> 'attributes') = 'object' AND f.e -> 'attributes' <> '{}' THEN
            -- A null value is "", as REST decodes it.
            (SELECT jsonb_object_agg(a.key, coalesce(a.value, '')) FROM jsonb_each_text(f.e -> 'attributes') AS a) END
    FROM (
        SELECT * FROM (
            SELECT DISTINCT ON (u.id) u.id, u.p, u.ord, x.e
            FROM unnest(ids, parts) WITH ORDINALITY AS u(id, p, ord)
            JOIN jsonb_array_elements(events) WITH ORDINALITY AS x(e, i) ON x.i = u.ord
            WHERE u.id = ANY(claimed)
            ORDER BY u.id, u.ord
        ) g ORDER BY g.ord
    ) f;
    IF cardinality(claimed) > 0 THEN
        -- store.RelayWakeKey: heard by every relay at commit.
        PERFORM ferry.wake_at_commit(-9223372036854775806);
    END IF;
    RETURN QUERY
        SELECT u.id, d.partition, NOT (u.id = ANY(claimed)) OR u.ord > min(u.ord) OVER (PARTITION BY u.id)
        FROM unnest(ids) WITH ORDINALITY AS u(id, ord)
        CROSS JOIN LATERAL (
            SELECT x.partition FROM ferry.event_dedup x WHERE x.topic_id = t.id AND x.event_id = u.id LIMIT 1
        ) d
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
    IF cardinality(fresh) = cardinality(ARRAY(SELECT DISTINCT unnest(ids))) THEN
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
