-- The SQL API (API.md § SQL API): functions an application calls inside
-- its own transaction. They run with Ferry's rights (SECURITY DEFINER,
-- fixed search_path) and are granted to two NOLOGIN roles, never to
-- PUBLIC. Nothing they do may hold a lock that REST traffic needs until
-- the caller commits (the caller's transaction may stay open for minutes).
--
-- Sections: common; consumers; producers: send; producers: publish.

-- ==== common ================================================================

-- Roles are global to the cluster: another database of it (a second Ferry,
-- a test template) may have made them already, perhaps at this moment.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['ferry_producer', 'ferry_consumer'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN NULL;
                WHEN insufficient_privilege THEN
                    RAISE EXCEPTION 'ferry: cannot create role %', r
                        USING HINT = 'Ferry''s database user needs CREATEROLE, or a superuser creates '
                            'the NOLOGIN roles ferry_producer and ferry_consumer before Ferry starts.';
            END;
        END IF;
    END LOOP;
END
$$;
GRANT USAGE ON SCHEMA ferry TO ferry_producer, ferry_consumer;

-- What REST answers with a 4xx, the SQL API raises: SQLSTATE FR<status>
-- (FR400, FR404, FR409, FR413, FR429) and the message
-- "ferry: <code>: <detail>", <code> being the REST problem code.
CREATE FUNCTION ferry.raise(status integer, code text, detail text) RETURNS bigint
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'FR' || status::text, MESSAGE = 'ferry: ' || code || ': ' || detail;
END $$;

-- The request limits the REST API has (FERRY_MAX_BODY_BYTES,
-- FERRY_MAX_BATCH), which the SQL API applies too: Ferry writes its
-- configuration here when it starts (store.SQLLimitsSet), and only if it
-- differs. One row.
CREATE TABLE ferry.sql_limits (
    one            boolean PRIMARY KEY DEFAULT true CHECK (one),
    max_body_bytes integer NOT NULL DEFAULT 262144,
    max_batch      integer NOT NULL DEFAULT 1000
);
INSERT INTO ferry.sql_limits DEFAULT VALUES;

-- Depth counters in a caller's transaction. The triggers of migration
-- 000001 add to the queue_counts row of the slot of the writing backend
-- (pg_backend_pid() % 64) and hold its lock to commit: fine for Ferry's own
-- short transactions, but an application's transaction that sent or acked
-- through the SQL API would stall, until it ends, every REST write to the
-- queue from a backend with the same slot. A SQL API function calls
-- ferry.counts_per_transaction() first: for the rest of the transaction its
-- counters go to a row of their own (slot 64 and up, from the transaction
-- id), which no other transaction writes; the maintenance sweep folds such
-- rows back into the 64 base slots (ferry.queue_counts_fold). Sums over a
-- queue's slots (stats, max_depth, orphans) count them all the same.
CREATE OR REPLACE FUNCTION ferry.count_slot() RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN current_setting('ferry.counts', true) = 'transaction'
        THEN 64 + (txid_current() % 2147483583)::integer
        ELSE pg_backend_pid() % 64 END
$$;

CREATE FUNCTION ferry.counts_per_transaction() RETURNS void LANGUAGE sql AS $$
    SELECT set_config('ferry.counts', 'transaction', true)
$$;

CREATE INDEX queue_counts_transaction_idx ON ferry.queue_counts (queue_id, slot) WHERE slot >= 64;

-- Folds up to lim committed per-transaction rows into the base slots, and
-- returns how many it folded. With none it writes nothing.
CREATE FUNCTION ferry.queue_counts_fold(lim integer) RETURNS bigint LANGUAGE sql AS $$
    /* ferry:queue_counts_fold */
    WITH victims AS MATERIALIZED (
        SELECT ctid FROM ferry.queue_counts WHERE slot >= 64
        ORDER BY queue_id, slot LIMIT lim
        FOR UPDATE SKIP LOCKED
    ),
    moved AS (
        DELETE FROM ferry.queue_counts c USING victims v WHERE c.ctid = v.ctid
        RETURNING c.queue_id, c.slot, c.messages, c.dead_letters
    ),
    folded AS (
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages, dead_letters)
        SELECT queue_id, slot % 64, sum(messages), sum(dead_letters)
        FROM moved GROUP BY queue_id, slot % 64 ORDER BY queue_id, slot % 64
        ON CONFLICT (queue_id, slot) DO UPDATE
            SET messages = c.messages + excluded.messages, dead_letters = c.dead_letters + excluded.dead_letters
    )
    SELECT count(*) FROM moved
$$;

-- ==== consumers =============================================================

-- ==== producers: send =======================================================

-- The statements that write a send, shared by both faces: REST's Sender
-- (store/sendplan.go) calls these functions in its group-commit
-- transactions, and ferry.send/ferry.send_batch call them in the caller's
-- transaction. One text per statement, so the two cannot drift. They are
-- the shapes that are robust to generic plans (DESIGN.md invariant 11;
-- store/sendplan.go explains them), kept verbatim: PL/pgSQL caches their
-- plans per connection like prepared statements, custom first, generic
-- after five calls, and the plan tests (store/plans_queue_test.go) attack
-- them through both faces. Internal: executable by nobody but Ferry.

-- The INSERT of messages with no group and no dedup id; ids come from the
-- sequence in input order (the i-th smallest id returned is the i-th
-- message). It writes nothing if the queue no longer exists.
CREATE FUNCTION ferry.message_send_plain(queue_id bigint, bodies text[], attrs text[], delays_ms bigint[],
    deliver_at timestamptz[]) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY INSERT /* ferry:message_send */ INTO ferry.messages (queue_id, id, visible_at, attributes, body)
        SELECT $1, nextval('ferry.message_id_seq'),
            coalesce(deliver_at, now() + delay_ms * interval '1 millisecond'), attributes::json, body::json
        FROM unnest($2::text[], $3::text[], $4::bigint[], $5::timestamptz[]) AS t(body, attributes, delay_ms, deliver_at)
        WHERE EXISTS (SELECT 1 FROM ferry.queues WHERE id = $1)
        RETURNING id;
END $$;
REVOKE ALL ON FUNCTION ferry.message_send_plain(bigint, text[], text[], bigint[], timestamptz[]) FROM PUBLIC;

-- The write of messages with groups or dedup ids: first the locks of the
-- groups named (exclusive, in key order: sends and promotions of a group
-- are serialised; the same statement as store's lockGroupsNamed), then one
-- INSERT that claims the dedup ids (a live one makes its message a
-- duplicate: inserted false) and files a message behind a live one of its
-- group as waiting. One row per message (ord, its 1-based place), none if
-- the queue no longer exists. The groups' live messages and the dedup
-- answers are read by one index probe per group or dedup id (LATERAL ...
-- LIMIT 1).
CREATE FUNCTION ferry.message_send_grouped(queue_id bigint, bodies text[], attrs text[], groups text[], dedup_ids text[],
    delays_ms bigint[], deliver_at timestamptz[], dedup_window_seconds integer)
    RETURNS TABLE(ord bigint, id bigint, inserted boolean) LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM /* ferry:message_group_lock_named */ count(pg_advisory_xact_lock(k)) FROM (
        SELECT DISTINCT ferry.group_lock_key($1, g) AS k FROM unnest($4::text[]) AS g WHERE g IS NOT NULL ORDER BY k
    ) locks;
    RETURN QUERY WITH /* ferry:message_send_grouped */ input AS (
            SELECT nextval('ferry.message_id_seq') AS id, t.*
            FROM (
                SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::timestamptz[])
                    WITH ORDINALITY AS t(body, attributes, grp, dedup_id, delay_ms, deliver_at, ord)
                ORDER BY ord
            ) t
            WHERE EXISTS (SELECT 1 FROM ferry.queues WHERE id = $1)
        ),
        claimed_dedup AS (
            INSERT INTO ferry.dedup AS d (queue_id, dedup_id, message_id, expires_at)
            SELECT $1, dedup_id, id, now() + make_interval(secs => $8) FROM input WHERE dedup_id IS NOT NULL
            ON CONFLICT (queue_id, dedup_id) DO UPDATE
                SET message_id = excluded.message_id, expires_at = excluded.expires_at
                WHERE d.expires_at <= now()
            RETURNING message_id
        ),
        fresh AS (
            SELECT * FROM input WHERE dedup_id IS NULL OR id IN (SELECT message_id FROM claimed_dedup)
        ),
        -- The groups that already have live messages: new ones wait.
        busy AS (
            SELECT g.grp FROM (SELECT DISTINCT grp FROM input WHERE grp IS NOT NULL) g
            CROSS JOIN LATERAL (
                SELECT true FROM ferry.messages x WHERE x.queue_id = $1 AND x.grp = g.grp LIMIT 1
            ) live
        ),
        inserted AS (
            INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, grp, dedup_id, attributes, body)
            SELECT $1, id,
                coalesce(deliver_at, now() + delay_ms * interval '1 millisecond'),
                grp IS NOT NULL AND (
                    row_number() OVER (PARTITION BY grp ORDER BY ord) > 1
                    OR grp IN (SELECT grp FROM busy)),
                grp, dedup_id, attributes::json, body::json
            FROM fresh
            RETURNING id
        )
        SELECT input.ord, input.id, inserted.id IS NOT NULL FROM input LEFT JOIN inserted USING (id);
END $$;
REVOKE ALL ON FUNCTION ferry.message_send_grouped(bigint, text[], text[], text[], text[], bigint[], timestamptz[], integer)
    FROM PUBLIC;

-- The dedup answers of a send, after its INSERT in the same transaction:
-- the message that holds each dedup id. The rows that beat the send are
-- committed (ON CONFLICT waited for them), so this statement's snapshot
-- sees them, and no sweep or takeover can change them before it reads.
CREATE FUNCTION ferry.message_send_dedup_answer(queue_id bigint, dedup_ids text[])
    RETURNS TABLE(dedup_id text, message_id bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY SELECT /* ferry:dedup_answer */ d.dedup_id, d.message_id FROM unnest($2::text[]) AS r(dedup_id)
        CROSS JOIN LATERAL (
            SELECT x.dedup_id, x.message_id FROM ferry.dedup x WHERE x.queue_id = $1 AND x.dedup_id = r.dedup_id LIMIT 1
        ) d;
END $$;
REVOKE ALL ON FUNCTION ferry.message_send_dedup_answer(bigint, text[]) FROM PUBLIC;

-- max_depth admission, first half: the queues' locks, exclusive, in the
-- order given (one order for every transaction), held to the commit so
-- that concurrent sends, from any instance or face, cannot pass a limit
-- together; then, in a statement of its own (whose snapshot sees every
-- send that held a lock before), their depths from the counters.
CREATE FUNCTION ferry.message_send_depth_lock(queue_ids bigint[]) RETURNS TABLE(queue_id bigint, depth bigint)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM /* ferry:message_send_depth_lock */ count(pg_advisory_xact_lock(ferry.queue_lock_key(id))) FROM unnest($1::bigint[]) AS t(id);
    RETURN QUERY SELECT /* ferry:queue_depth */ q.id, coalesce(c.depth, 0) FROM unnest($1::bigint[]) AS q(id)
        CROSS JOIN LATERAL (
            SELECT sum(messages)::bigint AS depth FROM ferry.queue_counts WHERE queue_id = q.id
        ) c;
END $$;
REVOKE ALL ON FUNCTION ferry.message_send_depth_lock(bigint[]) FROM PUBLIC;

-- max_depth admission, second half: which of the dedup ids are live
-- (within their window) in the queue, their rows locked FOR KEY SHARE so
-- that the dedup sweep cannot remove one before the send's INSERT finds
-- it: a message counted as a duplicate is never written.
CREATE FUNCTION ferry.message_send_dedup_live(queue_id bigint, dedup_ids text[]) RETURNS SETOF text
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY SELECT /* ferry:dedup_live */ d.dedup_id FROM unnest($2::text[]) AS r(dedup_id)
        CROSS JOIN LATERAL (
            SELECT x.dedup_id FROM ferry.dedup x
            WHERE x.queue_id = $1 AND x.dedup_id = r.dedup_id AND x.expires_at > now()
            LIMIT 1
            FOR KEY SHARE
        ) d;
END $$;
REVOKE ALL ON FUNCTION ferry.message_send_dedup_live(bigint, text[]) FROM PUBLIC;

-- ---- ferry.send, ferry.send_batch ------------------------------------------
--
-- A send in the caller's transaction: the messages exist exactly when it
-- commits (DESIGN.md invariant 14); a rollback, or of a savepoint around
-- the call, leaves no message, no dedup claim, no counter change, and wakes
-- nobody. The validation and the limits are REST's (handlers/messages.go,
-- handlers/decode.go, store.planSend), with REST's problem codes and
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
-- transaction it is refused (FR409) rather than filing a second head of a
-- group or passing the max_depth. Other sends work at any isolation level
-- (a concurrent send of the same dedup id may then fail with 40001, as
-- PostgreSQL's ON CONFLICT does there: retry).
-- Delays and sent_at count from the start of the caller's transaction
-- (now()), like every timestamp it writes. A committed send wakes the
-- queue's long polls and push delivery on every instance (NOTIFY, sent at
-- the commit).

-- The field name of message idx (0-based) as REST spells it: "messages[3].group",
-- or just "group" for ferry.send's single message.
CREATE FUNCTION ferry.send_field(single boolean, idx integer, name text) RETURNS text
    LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN single THEN name ELSE format('messages[%s].%s', idx, name) END
$$;
REVOKE ALL ON FUNCTION ferry.send_field(boolean, integer, text) FROM PUBLIC;

-- The JSON type of v as REST's type errors name it (the decoder's words).
CREATE FUNCTION ferry.send_json_kind(v jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE jsonb_typeof(v) WHEN 'boolean' THEN 'bool' WHEN 'number' THEN 'number ' || v::text ELSE jsonb_typeof(v) END
$$;
REVOKE ALL ON FUNCTION ferry.send_json_kind(jsonb) FROM PUBLIC;

-- The size of s as a JSON string encoded by Go's encoding/json (as REST
-- encodes attributes): quotes, \" \\ \b \f \n \r \t, \u00XX for other
-- control characters and for < > &, \u2028 and \u2029.
CREATE FUNCTION ferry.send_go_string_size(s text) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT 2 + octet_length(s)
        + (length(s) - length(translate(s, E'"\\\b\f\n\r\t', '')))
        + 5 * (length(s) - length(translate(s, E'\x01\x02\x03\x04\x05\x06\x07\x0b\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f<>&', '')))
        + 3 * (length(s) - length(translate(s, E'\u2028\u2029', '')))
$$;
REVOKE ALL ON FUNCTION ferry.send_go_string_size(text) FROM PUBLIC;

-- The size of v's compact JSON encoding (REST measures bodies so):
-- jsonb's text without the space it writes after each ':' and ','.
CREATE FUNCTION ferry.send_compact_size(v jsonb) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT octet_length(v::text) - coalesce((
        SELECT sum(CASE jsonb_typeof(x)
            WHEN 'object' THEN greatest(2 * (SELECT count(*) FROM jsonb_object_keys(x)) - 1, 0)
            WHEN 'array' THEN greatest(jsonb_array_length(x) - 1, 0)
            ELSE 0 END)
        FROM jsonb_path_query(v, 'strict $.**') AS x
        WHERE jsonb_typeof(x) IN ('object', 'array')), 0)
$$;
REVOKE ALL ON FUNCTION ferry.send_compact_size(jsonb) FROM PUBLIC;

-- Whether v is a W3C trace context traceparent (jobs.ValidTraceparent).
CREATE FUNCTION ferry.send_valid_traceparent(v text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT v ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[!-~]*)?$'
        AND left(v, 2) <> 'ff'
        AND substr(v, 4, 32) <> repeat('0', 32)
        AND substr(v, 37, 16) <> repeat('0', 16)
        AND (length(v) = 55 OR left(v, 2) <> '00')
$$;
REVOKE ALL ON FUNCTION ferry.send_valid_traceparent(text) FROM PUBLIC;

-- The shape of a send's messages, which REST's decoder checks before
-- anything else: each an object, no unknown member (first, over the whole
-- batch, as REST's strict pass), each member of its JSON type. Raises
-- FR400 at the first. One statement per step for the whole batch.
CREATE FUNCTION ferry.send_check_shape(messages jsonb, single boolean) RETURNS void LANGUAGE plpgsql AS $$
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
REVOKE ALL ON FUNCTION ferry.send_check_shape(jsonb, boolean) FROM PUBLIC;

-- Whether s is a date-time as REST reads one (RFC 3339, Go's time.Time).
CREATE FUNCTION ferry.send_valid_time(s text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF s !~ '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$' THEN
        RETURN false;
    END IF;
    RETURN substr(s, 1, 4)::integer >= 1 AND substr(s, 9, 2)::integer
        <= extract(day FROM make_date(substr(s, 1, 4)::integer, substr(s, 6, 2)::integer, 1) + interval '1 month - 1 day');
END $$;
REVOKE ALL ON FUNCTION ferry.send_valid_time(text) FROM PUBLIC;

-- The checks of message m (idx 0-based) that need no queue, in REST's
-- order: its errors as "field: message" (REST collects them all), after
-- raising FR413 at once if its body and attributes are over the limit.
CREATE FUNCTION ferry.send_check_message(m jsonb, idx integer, single boolean, max_body_bytes integer)
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
REVOKE ALL ON FUNCTION ferry.send_check_message(jsonb, integer, boolean, integer) FROM PUBLIC;

-- The messages of a send, checked and laid out as the INSERTs' arrays:
-- the messages written (not repeats of an earlier dedup id of the batch),
-- and for every message the 1-based place of the first one with its dedup
-- id (repeat_of, NULL if none: planSend's repeatOf).
CREATE TYPE ferry.send_columns AS (
    sent       integer[],
    repeat_of  integer[],
    bodies     text[],
    attrs      text[],
    groups     text[],
    dedups     text[],
    delays_ms  bigint[],
    deliver_at timestamptz[]
);

-- The checks of a send that need the queue (store.planSend: a delay or
-- deliver_at beyond its retention) and its layout.
CREATE FUNCTION ferry.send_plan(q ferry.queues, messages jsonb, single boolean) RETURNS ferry.send_columns
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
REVOKE ALL ON FUNCTION ferry.send_plan(ferry.queues, jsonb, boolean) FROM PUBLIC;

-- max_depth admission (store.admitByDepth for one request), with the
-- statements REST's admission runs: under the queue's lock, taken
-- exclusively and held to the caller's commit, the new messages must fit;
-- a dedup id that is live takes no room.
CREATE FUNCTION ferry.send_admit(q ferry.queues, p ferry.send_columns) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    depth bigint;
    live text[];
    fresh bigint;
BEGIN
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
CREATE FUNCTION ferry.send_messages(queue text, messages jsonb, single boolean)
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
REVOKE ALL ON FUNCTION ferry.send_messages(text, jsonb, boolean) FROM PUBLIC;

-- The write of a checked send (p of n messages) to queue q: the shared
-- INSERTs, the dedup answers, and the wake. Counters go to the
-- transaction's own row. No queue lock: see above.
CREATE FUNCTION ferry.send_write(q ferry.queues, p ferry.send_columns, n integer)
    RETURNS TABLE(id text, duplicate boolean) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    ids bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    dup boolean[] := array_fill(false, ARRAY[n]);
    got integer := 0;
    fresh boolean := false;
    r record;
BEGIN
    PERFORM ferry.counts_per_transaction();
    IF NOT EXISTS (SELECT 1 FROM unnest(p.groups, p.dedups) AS t(g, d) WHERE g IS NOT NULL OR d IS NOT NULL) THEN
        FOR r IN SELECT x, row_number() OVER (ORDER BY x) AS k
                FROM ferry.message_send_plain(q.id, p.bodies, p.attrs, p.delays_ms, p.deliver_at) AS x LOOP
            ids[p.sent[r.k]] := r.x;
            got := got + 1;
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
        PERFORM pg_notify('ferry_messages', q.id::text);
    END IF;
    RETURN QUERY SELECT t.i::text, t.d FROM unnest(ids, dup) WITH ORDINALITY AS t(i, d, o) ORDER BY t.o;
END $$;
REVOKE ALL ON FUNCTION ferry.send_write(ferry.queues, ferry.send_columns, integer) FROM PUBLIC;

-- ferry.send(queue, body, options): one message; options are the REST
-- message's other fields (attributes, group, dedup_id, delay_seconds,
-- deliver_at). See above for what it locks and who waits.
CREATE FUNCTION ferry.send(queue text, body jsonb, options jsonb DEFAULT '{}')
    RETURNS TABLE(id text, duplicate boolean)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
BEGIN
    IF options IS NULL OR jsonb_typeof(options) = 'null' THEN
        options := '{}';
    ELSIF jsonb_typeof(options) <> 'object' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'options: must be an object, not ' || ferry.send_json_kind(options));
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
CREATE FUNCTION ferry.send_batch(queue text, messages jsonb)
    RETURNS TABLE(id text, duplicate boolean)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM ferry.send_messages(queue, messages, false);
END $$;
REVOKE ALL ON FUNCTION ferry.send_batch(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.send_batch(text, jsonb) TO ferry_producer;

-- ==== producers: publish ====================================================
