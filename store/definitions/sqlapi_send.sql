-- ---- ferry.send, ferry.send_batch ------------------------------------------
--
-- A send in the caller's transaction: the messages exist exactly when it
-- commits (DESIGN.md invariant 14); a rollback, or of a savepoint around
-- the call, leaves no message, no dedup claim, no counter change, and wakes
-- nobody. The validation and the limits are REST's (handlers' messageSend
-- and Limits.CheckMessage, queueSendRules: the queue's max_message_size
-- and content_based_dedup, store.planSend), with REST's problem codes and
-- details; a batch is all-or-nothing.
--
-- Nobody waits for the caller: the send takes no lock others need until
-- the caller commits. Its depth counters go to a row of the transaction's
-- own (ferry.counts_per_transaction), and it does not hold the queue's lock
-- (which REST sends hold in shared mode to their commit). So a purge that
-- starts while the caller's transaction is open does not wait for it, and
-- the messages, if they commit while the purge runs, may be purged with
-- the rest (SQS documents the same of PurgeQueue); a queue deleted before
-- they commit leaves them orphaned, and the orphan sweep removes them
-- (store.QueueOrphans, from their counter row). Who does wait for the
-- caller's commit:
--   - a second send of the same dedup id (it must learn whether the first
--     commits: a duplicate if it does, a fresh message if not);
--   - sends to the same message group, and the ack or nack of that group's
--     head (the group's lock is held to the commit, so the group's order is
--     the commit order);
--   - for a queue with a max_depth, every send to the queue and its purge
--     or delete (admission holds the queue's lock exclusively to the
--     commit, so that concurrent sends cannot pass the limit together).
-- A send to a message group or to a queue with a max_depth must see what
-- committed while it waited for that lock, which a REPEATABLE READ or
-- SERIALIZABLE snapshot, taken before the wait, cannot: in such a
-- transaction it is refused (FR400) rather than filing a second head of a
-- group or passing the max_depth. Other sends work at any isolation level
-- (a concurrent send of the same dedup id may then fail with 40001, as
-- PostgreSQL's ON CONFLICT does there: retry).
-- Delays and sent_at count from the start of the caller's transaction
-- (now()), like every timestamp it writes. A committed send wakes the
-- queue's long polls and push delivery on every instance (NOTIFY, sent at
-- the commit).

-- The field name of message idx (0-based) as REST spells it: "messages[3].group",
-- or just "group" for ferry.send's single message.
CREATE OR REPLACE FUNCTION ferry.send_field(single boolean, idx integer, name text) RETURNS text
    LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN single THEN name ELSE format('messages[%s].%s', idx, name) END
$$;
REVOKE ALL ON FUNCTION ferry.send_field(boolean, integer, text) FROM PUBLIC;

-- The shape of a send's messages, which REST's decoder checks before
-- anything else: each an object, no unknown member (first, over the whole
-- batch, as REST's strict pass), each member of its JSON type. Raises
-- FR400 at the first. One statement per step for the whole batch, and
-- none when every message is an object of a body alone (one jsonpath
-- expression, no statement: the usual ferry.send).
CREATE OR REPLACE FUNCTION ferry.send_check_shape(messages jsonb, single boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    bad text;
BEGIN
    -- Strict: lax mode would unwrap an element that is an array.
    IF NOT jsonb_path_exists(messages, 'strict $[*] ? (@.type() != "object")') THEN
        IF NOT jsonb_path_exists(messages, 'strict $[*].keyvalue() ? (@.key != "body")') THEN
            RETURN;
        END IF;
    END IF;
    SELECT format('messages[%s]: must be an object, not %s', e.i - 1, ferry.json_kind(e.m, true)) INTO bad
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
                    ferry.send_field(single, e.i::integer - 1, kv.key) || ': must be an object, not ' || ferry.json_kind(kv.value, true)
                WHEN kv.key = 'attributes' AND jsonb_path_exists(kv.value, '$.* ? (@.type() != "string" && @.type() != "null")') THEN
                    (SELECT ferry.send_field(single, e.i::integer - 1, 'attributes.' || a.key) || ': must be a string, not '
                        || ferry.json_kind(a.value, true)
                    FROM jsonb_each(kv.value) AS a WHERE jsonb_typeof(a.value) NOT IN ('string', 'null') LIMIT 1)
                WHEN kv.key IN ('group', 'dedup_id') AND jsonb_typeof(kv.value) <> 'string' THEN
                    ferry.send_field(single, e.i::integer - 1, kv.key) || ': must be a string, not ' || ferry.json_kind(kv.value, true)
                WHEN kv.key = 'delay_seconds' AND (jsonb_typeof(kv.value) <> 'number' OR kv.value::text !~ '^-?[0-9]+$'
                        OR kv.value::text::numeric NOT BETWEEN -9223372036854775808 AND 9223372036854775807) THEN
                    ferry.send_field(single, e.i::integer - 1, kv.key) || ': must be an integer in range, not ' || ferry.json_kind(kv.value, true)
                WHEN kv.key = 'deliver_at' AND jsonb_typeof(kv.value) <> 'string' THEN
                    ferry.send_field(single, e.i::integer - 1, kv.key) || ': must be an RFC 3339 date-time string, such as 2030-01-02T15:04:05Z'
                END AS error) x
        WHERE x.error IS NOT NULL
        ORDER BY e.i LIMIT 1;
    END IF;
    IF bad IS NOT NULL THEN
        PERFORM ferry.raise(400, 'invalid_request', bad);
    END IF;
END $$;
REVOKE ALL ON FUNCTION ferry.send_check_shape(jsonb, boolean) FROM PUBLIC;

-- The checks of message m (idx 0-based) that need no queue, in REST's
-- order: its errors as "field: message" (REST collects them all), after
-- raising FR413 at once if its body and attributes are over the limit.
CREATE OR REPLACE FUNCTION ferry.send_check_message(m jsonb, idx integer, single boolean, max_body_bytes integer)
    RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    errs text[] := '{}';
    attrs jsonb := m -> 'attributes';
    attrs_size bigint := 0;
    body_bytes bigint;
    size bigint;
    s text;
BEGIN
    IF NOT m ? 'body' THEN
        RETURN ARRAY[ferry.send_field(single, idx, 'body') || ': is required'];
    END IF;
    body_bytes := octet_length((m -> 'body')::text);
    IF ferry.json_too_deep(m -> 'body', body_bytes) THEN
        PERFORM ferry.raise(400, 'invalid_request', ferry.send_field(single, idx, 'body')
            || ': must not nest deeper than ' || ferry.max_value_depth() || ' levels');
    END IF;
    IF jsonb_typeof(attrs) = 'object' AND attrs <> '{}' THEN
        IF EXISTS (SELECT 1 FROM jsonb_each_text(attrs) a
                WHERE a.key = '' OR octet_length(a.key) > 256 OR octet_length(a.value) > 4096) THEN
            errs := errs || (ferry.send_field(single, idx, 'attributes')
                || ': keys must be 1-256 bytes and values at most 4096 bytes of text');
        END IF;
        IF attrs ? 'traceparent' AND NOT ferry.valid_traceparent(coalesce(attrs ->> 'traceparent', '')) THEN
            errs := errs || (ferry.send_field(single, idx, 'attributes.traceparent') || ': must be a W3C trace context '
                || 'traceparent: 00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zeros');
        END IF;
        attrs_size := ferry.attributes_size(attrs);
    END IF;
    size := body_bytes + attrs_size;
    IF size > max_body_bytes THEN
        size := ferry.json_compact_size(m -> 'body') + attrs_size;
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
        WHEN (CASE WHEN m ? 'deliver_at' THEN NOT ferry.send_valid_time(m ->> 'deliver_at') END) THEN
            errs := errs || (ferry.send_field(single, idx, 'deliver_at') || ': must be an RFC 3339 date-time string, such as 2030-01-02T15:04:05Z');
        ELSE NULL;
    END CASE;
    RETURN errs;
END $$;
REVOKE ALL ON FUNCTION ferry.send_check_message(jsonb, integer, boolean, integer) FROM PUBLIC;

-- The checks of a send that need the queue (store.planSend: a delay or
-- deliver_at beyond its retention) and its layout.
CREATE OR REPLACE FUNCTION ferry.send_plan(q ferry.queues, messages jsonb, single boolean) RETURNS ferry.send_columns
    LANGUAGE plpgsql AS $$
DECLARE
    p ferry.send_columns := ROW('{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}');
    m jsonb;
    first_of jsonb := '{}';
    retention interval := make_interval(secs => q.retention_seconds);
    d text;
BEGIN
    -- By index, not jsonb_array_elements: no statement per call.
    FOR i IN 1 .. jsonb_array_length(messages) LOOP
        m := messages -> (i - 1);
        IF ferry.send_deliver_at(m ->> 'deliver_at') - now() >= retention THEN
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
        p.deliver_at := p.deliver_at || ferry.send_deliver_at(m ->> 'deliver_at');
    END LOOP;
    RETURN p;
END $$;
REVOKE ALL ON FUNCTION ferry.send_plan(ferry.queues, jsonb, boolean) FROM PUBLIC;

-- The dedup id a queue with content_based_dedup gives a message sent
-- without one (handlers.ContentDedupID of handlers.BodyText): the hex
-- SHA-256 of the body's text as the SQS face answers it: a string's
-- value, null's empty text, any other value's compact JSON text (here
-- jsonb's text without the space it writes after each ',' and ':'
-- outside strings; so an object's members in jsonb's order and numbers as
-- numeric writes them, which REST's sender may have spelt otherwise).
CREATE OR REPLACE FUNCTION ferry.content_dedup_id(body jsonb) RETURNS text LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT encode(sha256(convert_to(CASE jsonb_typeof(body)
        WHEN 'string' THEN body #>> '{}'
        WHEN 'null' THEN ''
        ELSE regexp_replace(body::text, '("(\\.|[^"\\])*")|([,:]) ', '\1\3', 'g') END, 'UTF8')), 'hex')
$$;
REVOKE ALL ON FUNCTION ferry.content_dedup_id(jsonb) FROM PUBLIC;

-- The queue's own rules (handlers' queueSendRules), after the queue is
-- found and before its plan: each message within the queue's
-- max_message_size (body and attributes measured as the server's limit
-- measures them; FR413 at the first over it), and, with
-- content_based_dedup, a dedup_id (ferry.content_dedup_id) for each
-- message without one. Returns the messages to send.
CREATE OR REPLACE FUNCTION ferry.send_queue_rules(q ferry.queues, messages jsonb, single boolean) RETURNS jsonb
    LANGUAGE plpgsql AS $$
DECLARE
    m jsonb;
    size bigint;
    out jsonb := '[]';
BEGIN
    IF coalesce(q.max_message_size, 0) = 0 AND NOT q.content_based_dedup THEN
        RETURN messages;
    END IF;
    FOR i IN 0 .. jsonb_array_length(messages) - 1 LOOP
        m := messages -> i;
        IF q.max_message_size > 0 THEN
            size := ferry.json_compact_size(m -> 'body') + CASE WHEN jsonb_typeof(m -> 'attributes') = 'object'
                AND m -> 'attributes' <> '{}' THEN ferry.attributes_size(m -> 'attributes') ELSE 0 END;
            IF size > q.max_message_size THEN
                PERFORM ferry.raise(413, 'payload_too_large', format('%s and attributes are %s bytes; the queue''s max_message_size is %s',
                    CASE WHEN single THEN 'body' ELSE format('messages[%s]: body', i) END, size, q.max_message_size));
            END IF;
        END IF;
        IF q.content_based_dedup AND m ->> 'dedup_id' IS NULL THEN
            m := m || jsonb_build_object('dedup_id', ferry.content_dedup_id(m -> 'body'));
        END IF;
        out := out || jsonb_build_array(m);
    END LOOP;
    RETURN out;
END $$;
REVOKE ALL ON FUNCTION ferry.send_queue_rules(ferry.queues, jsonb, boolean) FROM PUBLIC;

-- max_depth admission (store.admitByDepth for one request), with the
-- statements REST's admission runs: under the queue's lock, taken
-- exclusively and held to the caller's commit, the new messages must fit;
-- a dedup id that is live takes no room.
CREATE OR REPLACE FUNCTION ferry.send_admit(q ferry.queues, p ferry.send_columns) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    depth bigint;
    live text[];
    fresh bigint;
BEGIN
    -- The depth counts what this transaction sent and removed before: its
    -- own counter row (ferry.count_slot_of_transaction) is in the sum.
    SELECT d.depth INTO depth FROM ferry.message_send_depth_lock(ARRAY[q.id]) AS d;
    live := ARRAY(SELECT ferry.message_send_dedup_live(q.id, ARRAY(SELECT x FROM unnest(p.dedups) AS x WHERE x IS NOT NULL)));
    SELECT count(*) INTO fresh FROM unnest(p.dedups) AS r(dedup_id) WHERE r.dedup_id IS NULL OR r.dedup_id <> ALL (live);
    IF fresh > q.max_depth THEN
        PERFORM ferry.raise(400, 'invalid_request', format(
            'messages: the batch has %s new messages, more than the queue''s max_depth of %s: it can never fit', fresh, q.max_depth));
    ELSIF fresh > 0 AND depth + fresh > q.max_depth THEN
        PERFORM ferry.raise(429, 'queue_full', format('the queue holds %s of at most %s messages; retry later', depth, q.max_depth));
    END IF;
END $$;
REVOKE ALL ON FUNCTION ferry.send_admit(ferry.queues, ferry.send_columns) FROM PUBLIC;

-- The whole of ferry.send and ferry.send_batch: messages is the REST
-- messages array (for ferry.send, of its one message, whose fields are
-- then named without "messages[0].").
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
            PERFORM ferry.raise(400, 'invalid_request', 'messages: must be an array, not ' || ferry.json_kind(messages, true));
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
    messages := ferry.send_queue_rules(q, messages, single);
    p := ferry.send_plan(q, messages, single);
    IF q.max_depth > 0 THEN
        PERFORM ferry.read_committed_only('a send to a queue with a max_depth', 'the queue''s lock');
    ELSIF cardinality(array_remove(p.groups, NULL)) > 0 THEN
        PERFORM ferry.read_committed_only('a send to a message group', 'the group''s lock');
    END IF;
    IF q.max_depth > 0 THEN
        PERFORM ferry.send_admit(q, p);
    END IF;
    RETURN QUERY SELECT * FROM ferry.send_write(q, p, n);
END $$;
REVOKE ALL ON FUNCTION ferry.send_messages(text, jsonb, boolean) FROM PUBLIC;

-- The write of a checked send (p of n messages) to queue q: the shared
-- INSERTs, the dedup answers, and the wake. Counters go to the
-- transaction's own row. No queue lock: see above.
CREATE OR REPLACE FUNCTION ferry.send_write(q ferry.queues, p ferry.send_columns, n integer)
    RETURNS TABLE(id text, duplicate boolean) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    ids bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    dup boolean[] := array_fill(false, ARRAY[n]);
    got integer := 0;
    fresh boolean := false;
    plain bigint[];
    r record;
BEGIN
    PERFORM ferry.counts_per_transaction();
    IF cardinality(array_remove(p.groups, NULL)) = 0 AND cardinality(array_remove(p.dedups, NULL)) = 0 THEN
        plain := ARRAY(SELECT x FROM ferry.message_send_plain(q.id, p.bodies, p.attrs, p.delays_ms, p.deliver_at) AS x ORDER BY x);
        got := cardinality(plain);
        FOR k IN 1 .. got LOOP
            ids[p.sent[k]] := plain[k];
        END LOOP;
        fresh := got > 0;
    ELSE
        FOR r IN SELECT * FROM ferry.message_send_grouped(q.id, p.bodies, p.attrs, p.groups, p.dedups, p.delays_ms,
                p.deliver_at, q.dedup_window_seconds) LOOP
            ids[p.sent[r.ord]] := r.id;
            dup[p.sent[r.ord]] := NOT r.inserted;
            fresh := fresh OR r.inserted;
            got := got + 1;
        END LOOP;
        IF true = ANY (dup) THEN
            FOR r IN SELECT * FROM ferry.message_send_dedup_answer(q.id, ARRAY(SELECT d FROM unnest(p.dedups) AS d WHERE d IS NOT NULL)) LOOP
                FOR k IN 1 .. cardinality(p.sent) LOOP
                    IF dup[p.sent[k]] AND p.dedups[k] = r.dedup_id THEN
                        ids[p.sent[k]] := r.message_id;
                    END IF;
                END LOOP;
            END LOOP;
        END IF;
    END IF;
    IF got = 0 THEN
        -- Deleted since it was looked up: nothing was written.
        PERFORM ferry.raise(404, 'not_found', format('no such queue: %s', q.name));
    END IF;
    FOR i IN 1 .. n LOOP
        IF p.repeat_of[i] IS NOT NULL THEN
            ids[i] := ids[p.repeat_of[i]];
            dup[i] := true;
        END IF;
    END LOOP;
    IF fresh THEN
        PERFORM ferry.wake_at_commit(q.id);
    END IF;
    FOR k IN 1 .. n LOOP
        id := ids[k]::text;
        duplicate := dup[k];
        RETURN NEXT;
    END LOOP;
END $$;
REVOKE ALL ON FUNCTION ferry.send_write(ferry.queues, ferry.send_columns, integer) FROM PUBLIC;

-- ferry.send(queue, body, options): one message; options are the REST
-- message's other fields (attributes, group, dedup_id, delay_seconds,
-- deliver_at). See above for what it locks and who waits.
CREATE OR REPLACE FUNCTION ferry.send(queue text, body jsonb, options jsonb DEFAULT '{}')
    RETURNS TABLE(id text, duplicate boolean)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
BEGIN
    IF options IS NULL OR jsonb_typeof(options) = 'null' THEN
        options := '{}';
    ELSIF jsonb_typeof(options) <> 'object' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'options: must be an object, not ' || ferry.json_kind(options, true));
    ELSIF options ? 'body' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'options.body: unknown field (the body is the second argument)');
    END IF;
    IF body IS NULL THEN
        PERFORM ferry.raise(400, 'invalid_request', 'body: is required');
    END IF;
    RETURN QUERY SELECT * FROM ferry.send_messages(queue, jsonb_build_array(options || jsonb_build_object('body', body)), true);
END $$;
REVOKE ALL ON FUNCTION ferry.send(text, jsonb, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.send(text, jsonb, jsonb) TO ferry_producer;

-- ferry.send_batch(queue, messages): messages is the REST messages array;
-- one row per message, in order. All or nothing.
CREATE OR REPLACE FUNCTION ferry.send_batch(queue text, messages jsonb)
    RETURNS TABLE(id text, duplicate boolean)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM ferry.send_messages(queue, messages, false);
END $$;
REVOKE ALL ON FUNCTION ferry.send_batch(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.send_batch(text, jsonb) TO ferry_producer;
