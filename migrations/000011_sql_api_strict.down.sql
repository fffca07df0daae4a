-- Back to migration 000010 (whose functions are 000009's): the 000009 text of
-- every function this migration replaced, then without this one's own.

CREATE OR REPLACE FUNCTION ferry.send_check_shape(messages jsonb, single boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    bad text;
BEGIN
    SELECT format('messages[%s]: must be an object, not %s', e.i - 1, ferry.send_json_kind(e.m)) INTO bad
    FROM jsonb_array_elements(messages) WITH ORDINALITY AS e(m, i)
    WHERE jsonb_typeof(e.m) <> 'object' ORDER BY e.i LIMIT 1;
    IF bad IS NULL THEN
        SELECT ferry.send_field(single, e.i::integer - 1, kv.key) || ': unknown field (member names are case-sensitive)' INTO bad
        FROM jsonb_array_elements(messages) WITH ORDINALITY AS e(m, i), jsonb_each(e.m) AS kv
        WHERE kv.key NOT IN ('body', 'attributes', 'group', 'dedup_id', 'delay_seconds', 'deliver_at')
        ORDER BY e.i LIMIT 1;
    END IF;
    IF bad IS NULL THEN
        SELECT x.error INTO bad
        FROM jsonb_array_elements(messages) WITH ORDINALITY AS e(m, i), jsonb_each(e.m) AS kv,
            LATERAL (SELECT CASE
                WHEN kv.key = 'body' OR jsonb_typeof(kv.value) = 'null' THEN NULL
                WHEN kv.key = 'attributes' AND jsonb_typeof(kv.value) <> 'object' THEN
                    ferry.send_field(single, e.i::integer - 1, kv.key) || ': must be an object, not ' || ferry.send_json_kind(kv.value)
                WHEN kv.key = 'attributes' AND jsonb_path_exists(kv.value, '$.* ? (@.type() != "string" && @.type() != "null")') THEN
                    (SELECT ferry.send_field(single, e.i::integer - 1, 'attributes.' || a.key) || ': must be a string, not '
                        || ferry.send_json_kind(a.value)
                    FROM jsonb_each(kv.value) AS a WHERE jsonb_typeof(a.value) NOT IN ('string', 'null') LIMIT 1)
                WHEN kv.key IN ('group', 'dedup_id') AND jsonb_typeof(kv.value) <> 'string' THEN
                    ferry.send_field(single, e.i::integer - 1, kv.key) || ': must be a string, not ' || ferry.send_json_kind(kv.value)
                WHEN kv.key = 'delay_seconds' AND (jsonb_typeof(kv.value) <> 'number' OR kv.value::text !~ '^-?[0-9]+$'
                        OR kv.value::text::numeric NOT BETWEEN -9223372036854775808 AND 9223372036854775807) THEN
                    ferry.send_field(single, e.i::integer - 1, kv.key) || ': must be an integer in range, not ' || ferry.send_json_kind(kv.value)
                WHEN kv.key = 'deliver_at' AND (jsonb_typeof(kv.value) <> 'string' OR NOT ferry.send_valid_time(kv.value #>> '{}')) THEN
                    ferry.send_field(single, e.i::integer - 1, kv.key) || ': must be an RFC 3339 date-time string, such as 2030-01-02T15:04:05Z'
                END AS error) x
        WHERE x.error IS NOT NULL
        ORDER BY e.i LIMIT 1;
    END IF;
    IF bad IS NOT NULL THEN
        PERFORM ferry.raise(400, 'invalid_request', bad);
    END IF;
END $$;

CREATE OR REPLACE FUNCTION ferry.send_check_message(m jsonb, idx integer, single boolean, max_body_bytes integer)
    RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    errs text[] := '{}';
    attrs jsonb := m -> 'attributes';
    attrs_size bigint := 0;
    size bigint;
    s text;
BEGIN
    IF NOT m ? 'body' THEN
        RETURN ARRAY[ferry.send_field(single, idx, 'body') || ': is required'];
    END IF;
    IF jsonb_typeof(attrs) = 'object' AND attrs <> '{}' THEN
        IF EXISTS (SELECT 1 FROM jsonb_each_text(attrs) a
                WHERE a.key = '' OR octet_length(a.key) > 256 OR octet_length(a.value) > 4096) THEN
            errs := errs || (ferry.send_field(single, idx, 'attributes')
                || ': keys must be 1-256 bytes and values at most 4096 bytes of text');
        END IF;
        IF attrs ? 'traceparent' AND NOT ferry.send_valid_traceparent(coalesce(attrs ->> 'traceparent', '')) THEN
            errs := errs || (ferry.send_field(single, idx, 'attributes.traceparent') || ': must be a W3C trace context '
                || 'traceparent: 00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zeros');
        END IF;
        SELECT 1 + sum(ferry.send_go_string_size(a.key) + 1 + ferry.send_go_string_size(coalesce(a.value, '')) + 1)
        INTO attrs_size FROM jsonb_each_text(attrs) a;
    END IF;
    size := octet_length((m -> 'body')::text) + attrs_size;
    IF size > max_body_bytes THEN
        size := ferry.send_compact_size(m -> 'body') + attrs_size;
        IF size > max_body_bytes THEN
            PERFORM ferry.raise(413, 'payload_too_large', format('%s and attributes are %s bytes; the limit is %s',
                CASE WHEN single THEN 'body' ELSE format('messages[%s]: body', idx) END, size, max_body_bytes));
        END IF;
    END IF;
    FOREACH s IN ARRAY ARRAY['group', 'dedup_id'] LOOP
        IF m ->> s IS NOT NULL AND (m ->> s = '' OR octet_length(m ->> s) > 128) THEN
            errs := errs || (ferry.send_field(single, idx, s) || ': must be 1-128 bytes of text');
        END IF;
    END LOOP;
    CASE
        WHEN m ->> 'delay_seconds' IS NOT NULL AND m ->> 'deliver_at' IS NOT NULL THEN
            errs := errs || (ferry.send_field(single, idx, 'deliver_at') || ': cannot be combined with delay_seconds');
        WHEN (m ->> 'delay_seconds')::numeric NOT BETWEEN 0 AND 1209600 THEN
            errs := errs || (ferry.send_field(single, idx, 'delay_seconds') || ': must be between 0 and 1209600');
        ELSE NULL;
    END CASE;
    RETURN errs;
END $$;

CREATE OR REPLACE FUNCTION ferry.send_plan(q ferry.queues, messages jsonb, single boolean) RETURNS ferry.send_columns
    LANGUAGE plpgsql AS $$
DECLARE
    p ferry.send_columns := ROW('{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}');
    m jsonb;
    i integer := 0;
    first_of jsonb := '{}';
    retention interval := make_interval(secs => q.retention_seconds);
    d text;
BEGIN
    FOR m IN SELECT value FROM jsonb_array_elements(messages) LOOP
        i := i + 1;
        IF (m ->> 'deliver_at')::timestamptz - now() >= retention THEN
            PERFORM ferry.raise(400, 'invalid_request', ferry.send_field(single, i - 1, 'deliver_at') || ': is beyond the queue''s retention');
        ELSIF make_interval(secs => (m ->> 'delay_seconds')::integer) >= retention THEN
            PERFORM ferry.raise(400, 'invalid_request', ferry.send_field(single, i - 1, 'delay_seconds') || ': is beyond the queue''s retention');
        END IF;
        d := m ->> 'dedup_id';
        IF d IS NOT NULL AND first_of ? d THEN
            p.repeat_of[i] := (first_of ->> d)::integer;
            CONTINUE;
        ELSIF d IS NOT NULL THEN
            first_of := first_of || jsonb_build_object(d, i);
        END IF;
        p.repeat_of[i] := NULL;
        p.sent := p.sent || i;
        p.bodies := p.bodies || (m -> 'body')::text;
        IF jsonb_typeof(m -> 'attributes') = 'object' AND m -> 'attributes' <> '{}' THEN
            -- A null value is "", as REST decodes it.
            p.attrs := p.attrs || (SELECT jsonb_object_agg(a.key, coalesce(a.value, ''))::text
                FROM jsonb_each_text(m -> 'attributes') AS a);
        ELSE
            p.attrs := p.attrs || NULL::text;
        END IF;
        p.groups := p.groups || (m ->> 'group');
        p.dedups := p.dedups || d;
        p.delays_ms := p.delays_ms || CASE
            WHEN m ->> 'deliver_at' IS NOT NULL THEN 0
            WHEN m ->> 'delay_seconds' IS NOT NULL THEN (m ->> 'delay_seconds')::bigint * 1000
            ELSE q.delay_seconds::bigint * 1000 END;
        p.deliver_at := p.deliver_at || (m ->> 'deliver_at')::timestamptz;
    END LOOP;
    RETURN p;
END $$;

CREATE OR REPLACE FUNCTION ferry.send_messages(queue text, messages jsonb, single boolean)
    RETURNS TABLE(id text, duplicate boolean) LANGUAGE plpgsql AS $$
DECLARE
    lim ferry.sql_limits;
    q ferry.queues;
    p ferry.send_columns;
    n integer;
    errs text[] := '{}';
BEGIN
    IF queue IS NULL OR queue !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'queue: must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$');
    END IF;
    SELECT * INTO lim FROM ferry.sql_limits;
    CASE
        WHEN messages IS NULL OR jsonb_typeof(messages) = 'null' THEN
            PERFORM ferry.raise(400, 'invalid_request', 'messages: is required');
        WHEN jsonb_typeof(messages) <> 'array' THEN
            PERFORM ferry.raise(400, 'invalid_request', 'messages: must be an array, not ' || ferry.send_json_kind(messages));
        WHEN jsonb_array_length(messages) = 0 THEN
            PERFORM ferry.raise(400, 'invalid_request', 'messages: must not be empty');
        WHEN jsonb_array_length(messages) > lim.max_batch THEN
            PERFORM ferry.raise(413, 'payload_too_large', format('a batch holds at most %s messages, not %s',
                lim.max_batch, jsonb_array_length(messages)));
        ELSE NULL;
    END CASE;
    n := jsonb_array_length(messages);
    PERFORM ferry.send_check_shape(messages, single);
    FOR i IN 0 .. n - 1 LOOP
        errs := errs || ferry.send_check_message(messages -> i, i, single, lim.max_body_bytes);
    END LOOP;
    IF cardinality(errs) = 1 THEN
        PERFORM ferry.raise(400, 'invalid_request', errs[1]);
    ELSIF cardinality(errs) > 1 THEN
        PERFORM ferry.raise(400, 'invalid_request', format('%s invalid fields; first: %s', cardinality(errs), errs[1]));
    END IF;
    SELECT * INTO q FROM ferry.queues x WHERE x.name = queue AND x.topic_id IS NULL;
    IF NOT FOUND THEN
        PERFORM ferry.raise(404, 'not_found', format('no such queue: %s', queue));
    END IF;
    p := ferry.send_plan(q, messages, single);
    IF current_setting('transaction_isolation') <> 'read committed'
            AND (q.max_depth > 0 OR EXISTS (SELECT 1 FROM unnest(p.groups) AS g WHERE g IS NOT NULL)) THEN
        PERFORM ferry.raise(409, 'conflict', format('a send %s must run in a READ COMMITTED transaction, not %s: '
            'it must see what committed while it waited for the %s lock',
            CASE WHEN q.max_depth > 0 THEN 'to a queue with a max_depth' ELSE 'to a message group' END,
            upper(current_setting('transaction_isolation')),
            CASE WHEN q.max_depth > 0 THEN 'queue''s' ELSE 'group''s' END));
    END IF;
    IF q.max_depth > 0 THEN
        PERFORM ferry.send_admit(q, p);
    END IF;
    RETURN QUERY SELECT * FROM ferry.send_write(q, p, n);
END $$;

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
        PERFORM ferry.raise(400, 'invalid_request', 'events: must be an array, not ' || ferry.publish_kind(events));
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
                || ': must be an object, not ' || ferry.publish_kind(e));
        END IF;
        FOR k, v IN SELECT * FROM jsonb_each(e) LOOP
            f := CASE WHEN single THEN k ELSE format('events[%s].%s', i, k) END;
            IF k NOT IN ('id', 'type', 'key', 'data', 'attributes') THEN
                PERFORM ferry.raise(400, 'invalid_request', f || ': unknown field (member names are case-sensitive)');
            ELSIF k IN ('id', 'type', 'key') AND jsonb_typeof(v) NOT IN ('string', 'null') THEN
                PERFORM ferry.raise(400, 'invalid_request', f || ': must be a string, not ' || ferry.publish_kind(v));
            ELSIF k = 'attributes' AND jsonb_typeof(v) NOT IN ('object', 'null') THEN
                PERFORM ferry.raise(400, 'invalid_request', f || ': must be an object, not ' || ferry.publish_kind(v));
            ELSIF k = 'attributes' AND jsonb_typeof(v) = 'object' THEN
                SELECT a.key INTO k FROM jsonb_each(v) a WHERE jsonb_typeof(a.value) <> 'string' ORDER BY a.key LIMIT 1;
                IF FOUND THEN
                    PERFORM ferry.raise(400, 'invalid_request', format('%s: must be a string, not %s',
                        f, ferry.publish_kind(v -> k)));
                END IF;
            END IF;
        END LOOP;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION ferry.publish_check_fields(events jsonb, single boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    max_body integer := (SELECT l.max_body_bytes FROM ferry.sql_limits l);
    e jsonb;
    i integer;
    name text;
    item text;
    attrs jsonb;
    size bigint;
    errs text[] := '{}';
BEGIN
    FOR e, i IN SELECT x.e, x.i - 1 FROM jsonb_array_elements(events) WITH ORDINALITY AS x(e, i) LOOP
        item := CASE WHEN single THEN '' ELSE format('events[%s].', i) END;
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
            IF attrs ? 'traceparent' AND NOT ferry.valid_traceparent(attrs ->> 'traceparent') THEN
                errs := errs || (item || 'attributes.traceparent: must be a W3C trace context traceparent: '
                    || '00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zeros');
            END IF;
        END IF;
        size := coalesce(octet_length(nullif(e -> 'data', 'null')::text), 0) + coalesce(octet_length(attrs::text), 0);
        IF size > max_body THEN
            size := coalesce(ferry.json_compact_size(nullif(e -> 'data', 'null')), 0)
                + coalesce(ferry.json_compact_size(attrs), 0);
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
        CASE WHEN jsonb_typeof(f.e -> 'attributes') = 'object' AND f.e -> 'attributes' <> '{}' THEN f.e -> 'attributes' END
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

CREATE OR REPLACE FUNCTION ferry.receive(target text, max_messages integer DEFAULT 1, visibility_timeout_seconds integer DEFAULT NULL)
    RETURNS TABLE(id text, body jsonb, attributes jsonb, "group" text, dedup_id text, receipt text,
        receive_count integer, sent_at timestamptz)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_q ferry.queues;
    v_n integer := coalesce(max_messages, 1);
    v_errors text[] := '{}';
    v_timeout_ms bigint;
    v_got integer := 0;
    v_over bigint[];
    v_r record;
BEGIN
    PERFORM ferry.consumer_target(target, false);
    IF v_n NOT BETWEEN 1 AND 100 THEN
        v_errors := v_errors || 'max_messages: must be between 1 and 100'::text;
    END IF;
    IF visibility_timeout_seconds NOT BETWEEN 1 AND 43200 THEN
        v_errors := v_errors || 'visibility_timeout_seconds: must be between 1 and 43200'::text;
    END IF;
    PERFORM ferry.consumer_invalid(v_errors);
    v_q := ferry.consumer_target(target, true);
    -- A queue configured with 0 before it was refused gets 1, as in REST.
    v_timeout_ms := 1000::bigint * coalesce(visibility_timeout_seconds, greatest(1, v_q.visibility_timeout_seconds));
    PERFORM ferry.counts_per_transaction();
    FOR pass IN 1..3 LOOP
        EXIT WHEN v_got >= v_n;
        v_over := '{}';
        FOR v_r IN
            SELECT * FROM ferry.message_claim(v_q.id, v_n - v_got, v_q.max_receives, v_timeout_ms)
            ORDER BY o_exhausted, o_sent_at, o_id
        LOOP
            IF v_r.o_exhausted THEN
                v_over := v_over || v_r.o_id;
                CONTINUE;
            END IF;
            v_got := v_got + 1;
            IF v_q.topic_id IS NULL THEN
                id := v_r.o_id::text;
                attributes := coalesce(v_r.o_attributes, '{}')::jsonb;
            ELSE
                id := v_r.o_event_id;
                attributes := coalesce(v_r.o_body::jsonb -> 'attributes', '{}');
            END IF;
            body := v_r.o_body::jsonb;
            "group" := v_r.o_grp;
            dedup_id := v_r.o_dedup_id;
            receipt := ferry.receipt_encode(v_r.o_id, v_r.o_claim_token);
            receive_count := v_r.o_receive_count;
            sent_at := v_r.o_sent_at;
            RETURN NEXT;
        END LOOP;
        EXIT WHEN cardinality(v_over) = 0;
        PERFORM ferry.message_dead_letter(v_q.id, v_over, v_q.max_receives);
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION ferry.ack(target text, receipts text[])
    RETURNS TABLE(receipt text, status text)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_q ferry.queues;
    v_ids bigint[];
    v_tokens bigint[];
    v_applied_ids bigint[];
    v_applied_tokens bigint[];
    v_promoted boolean;
BEGIN
    PERFORM ferry.consumer_target(target, false);
    SELECT d.ids, d.tokens INTO v_ids, v_tokens FROM ferry.consumer_receipts(receipts) d;
    v_q := ferry.consumer_target(target, true);
    PERFORM ferry.counts_per_transaction();
    SELECT array_agg(a.o_id) FILTER (WHERE a.o_id <> -1), array_agg(a.o_token) FILTER (WHERE a.o_id <> -1),
        coalesce(bool_or(a.o_id = -1), false)
    INTO v_applied_ids, v_applied_tokens, v_promoted
    FROM ferry.message_ack(v_q.id, v_ids, v_tokens, true) a;
    IF v_promoted THEN
        PERFORM ferry.wake_at_commit(v_q.id);
    END IF;
    RETURN QUERY SELECT * FROM ferry.consumer_results(receipts, v_ids, v_tokens, v_applied_ids, v_applied_tokens);
END $$;

CREATE OR REPLACE FUNCTION ferry.nack(target text, receipts text[], options jsonb DEFAULT '{}')
    RETURNS TABLE(receipt text, status text)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_q ferry.queues;
    v_o record;
    v_errors text[] := '{}';
    v_ids bigint[];
    v_tokens bigint[];
    v_applied_ids bigint[];
    v_applied_tokens bigint[];
    v_dead integer;
BEGIN
    PERFORM ferry.consumer_target(target, false);
    SELECT * INTO v_o FROM ferry.consumer_nack_options(options);
    SELECT d.ids, d.tokens INTO v_ids, v_tokens FROM ferry.consumer_receipts(receipts) d;
    IF v_o.delay_ms = -1 THEN
        v_errors := v_errors || 'delay_seconds: must be between 0 and 43200'::text;
    END IF;
    IF octet_length(v_o.error) > 4096 THEN
        v_errors := v_errors || 'error: must be at most 4096 bytes of text'::text;
    END IF;
    PERFORM ferry.consumer_invalid(v_errors);
    v_q := ferry.consumer_target(target, true);
    PERFORM ferry.counts_per_transaction();
    SELECT array_agg(n.o_id), array_agg(n.o_token), count(*) FILTER (WHERE n.o_dead)
    INTO v_applied_ids, v_applied_tokens, v_dead
    FROM ferry.message_nack(v_q.id, v_ids, v_tokens, v_o.dead_letter, v_q.max_receives, v_o.error, v_o.delay_ms,
        v_q.retry_min_seconds, v_q.retry_max_seconds) n;
    -- As store.nackWakes: claimable at once after a nack without delay
    -- or one that dead-lettered (a group's next message is promoted).
    IF cardinality(v_applied_ids) > 0 AND (v_dead > 0 OR v_o.delay_ms = 0) THEN
        PERFORM ferry.wake_at_commit(v_q.id);
    END IF;
    RETURN QUERY SELECT * FROM ferry.consumer_results(receipts, v_ids, v_tokens, v_applied_ids, v_applied_tokens);
END $$;

CREATE OR REPLACE FUNCTION ferry.extend(target text, receipts text[], visibility_timeout_seconds integer)
    RETURNS TABLE(receipt text, status text)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_q ferry.queues;
    v_ids bigint[];
    v_tokens bigint[];
    v_applied_ids bigint[];
    v_applied_tokens bigint[];
BEGIN
    PERFORM ferry.consumer_target(target, false);
    SELECT d.ids, d.tokens INTO v_ids, v_tokens FROM ferry.consumer_receipts(receipts) d;
    IF visibility_timeout_seconds IS NULL THEN
        PERFORM ferry.raise(400, 'invalid_request', 'visibility_timeout_seconds: is required');
    ELSIF visibility_timeout_seconds NOT BETWEEN 1 AND 43200 THEN
        PERFORM ferry.raise(400, 'invalid_request', 'visibility_timeout_seconds: must be between 1 and 43200');
    END IF;
    v_q := ferry.consumer_target(target, true);
    SELECT array_agg(x.o_id), array_agg(x.o_token) INTO v_applied_ids, v_applied_tokens
    FROM ferry.message_extend(v_q.id, v_ids, v_tokens, 1000::bigint * visibility_timeout_seconds) x;
    RETURN QUERY SELECT * FROM ferry.consumer_results(receipts, v_ids, v_tokens, v_applied_ids, v_applied_tokens);
END $$;

DROP FUNCTION ferry.max_value_depth(), ferry.json_too_deep(jsonb, bigint), ferry.attributes_size(jsonb),
    ferry.read_committed_only(text, text), ferry.send_deliver_at(text);
