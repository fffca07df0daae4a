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

-- What a caller's transaction does at its commit: ferry.at_commit holds,
-- until then, the depth-counter changes of the transaction's SQL API
-- calls, and a deferred trigger applies them just before the commit.
-- Unlogged: a row lives only inside its transaction (the trigger deletes
-- it), so there is nothing to recover.
CREATE UNLOGGED TABLE ferry.at_commit (
    xact         xid8   NOT NULL DEFAULT pg_current_xact_id(),
    key          bigint NOT NULL, -- the queue's id
    messages     bigint NOT NULL DEFAULT 0,
    dead_letters bigint NOT NULL DEFAULT 0
);
CREATE INDEX at_commit_xact_idx ON ferry.at_commit (xact);

-- Depth counters. The triggers of migration 000001 add to the
-- queue_counts row of the writing backend's slot (pg_backend_pid() % 64)
-- and hold its lock to commit: fine for Ferry's own short transactions,
-- but an application's transaction that sent or acked through the SQL API
-- would stall, until it ends, every REST write to the queue from a backend
-- with the same slot. So a SQL API function calls
-- ferry.counts_per_transaction() before it writes: for the rest of the
-- transaction the triggers record their changes in ferry.at_commit
-- instead, which nobody else writes, and they are added up into the slots
-- when the transaction commits: the slot is locked from then to the end
-- of the commit only, as a REST write's is. Those slots are 64..127, apart
-- from REST's 0..63: a REST transaction holds its slot while it waits for
-- a group lock (a send to a group after one to another queue), and a
-- committing SQL API transaction may hold that group's lock, so sharing
-- slots would let the two deadlock. (A caller that runs SET
-- CONSTRAINTS ALL IMMEDIATE applies them at once, and holds the slot from
-- then on.)
CREATE FUNCTION ferry.counts_per_transaction() RETURNS void LANGUAGE sql AS $$
    SELECT set_config('ferry.counts', 'transaction', true)
$$;

-- Wakes: a SQL API function that makes messages claimable (or events
-- pending) NOTIFYs the Notifier key in the caller's transaction; PostgreSQL
-- delivers it to every Ferry instance at the commit, and drops it on
-- rollback. One NOTIFY per application transaction has a cost: a NOTIFY
-- takes a cluster-wide lock from its commit until its commit record is on
-- disk, so notifying commits wait for each other's fsync (REST avoids it
-- by sending at most one NOTIFY per window from Go; docs/outbox.md has the
-- numbers).
CREATE FUNCTION ferry.wake_at_commit(key bigint) RETURNS void LANGUAGE sql AS $$
    SELECT pg_notify('ferry_messages', key::text)
$$;

-- At commit: the transaction's counter changes, summed per queue, into
-- its slot, in queue order (the lock order of every counter write). The
-- first of the transaction's rows to fire does it all; the others find
-- nothing left. A deferred trigger runs as whoever commits (the
-- application's role, which may not touch Ferry's tables): it runs with
-- Ferry's rights. Its DELETE finds the transaction's rows by the index,
-- whatever plan the session cached while the table was small (a
-- sequential scan would read every dead row a busy table holds).
CREATE FUNCTION ferry.at_commit_apply() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = ferry, pg_temp SET enable_seqscan = off AS $$
BEGIN
    WITH d AS (
        DELETE FROM ferry.at_commit WHERE xact = pg_current_xact_id()
        RETURNING key, messages, dead_letters
    )
    INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages, dead_letters)
    SELECT key, 64 + pg_backend_pid() % 64, sum(messages), sum(dead_letters)
    FROM d GROUP BY key HAVING sum(messages) <> 0 OR sum(dead_letters) <> 0 ORDER BY key
    ON CONFLICT (queue_id, slot) DO UPDATE
        SET messages = c.messages + excluded.messages, dead_letters = c.dead_letters + excluded.dead_letters;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER at_commit_apply AFTER INSERT ON ferry.at_commit
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ferry.at_commit_apply();

-- Called by the SQL API's functions with Ferry's rights; nobody else's.
REVOKE ALL ON FUNCTION ferry.raise(integer, text, text), ferry.counts_per_transaction(),
    ferry.wake_at_commit(bigint), ferry.at_commit_apply() FROM PUBLIC;

CREATE OR REPLACE FUNCTION ferry.messages_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    IF current_setting('ferry.counts', true) = 'transaction' THEN
        INSERT INTO ferry.at_commit (key, messages)
        SELECT queue_id, sign * count(*) FROM changed GROUP BY queue_id;
    ELSE
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages)
        SELECT queue_id, ferry.count_slot(), sign * count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET messages = c.messages + excluded.messages;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION ferry.dead_letters_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    IF current_setting('ferry.counts', true) = 'transaction' THEN
        INSERT INTO ferry.at_commit (key, dead_letters)
        SELECT queue_id, sign * count(*) FROM changed GROUP BY queue_id;
    ELSE
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, dead_letters)
        SELECT queue_id, ferry.count_slot(), sign * count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET dead_letters = c.dead_letters + excluded.dead_letters;
    END IF;
    RETURN NULL;
END $$;

-- ==== consumers =============================================================

-- The claim engine: the statements that claim, dead-letter, ack, nack and
-- extend, one text each. The REST API (store/messages.go) and push
-- delivery call these functions, and so do ferry.receive, ferry.ack,
-- ferry.nack and ferry.extend below: both faces run the same statements.
-- Their shapes keep them O(batch) whatever plan PostgreSQL chooses
-- (DESIGN.md invariant 11; store/messages.go explains each one; the plan
-- tests store/plans_queue_test.go call them through the Go store), and a
-- PL/pgSQL statement may get a generic plan after five calls. The time
-- a statement compares leases with is the clock at the call, not now():
-- in an application's transaction now() is when the transaction began.
-- Not granted to anyone: only Ferry (the owner) and the definer functions
-- call them.

-- The group locks of the given live messages of a queue, in key order:
-- taken before any statement that removes a group head, so that group
-- locks are always taken before row locks.
-- (PL/pgSQL, not SQL: a SQL function's statement would be planned again
-- at every call.)
CREATE FUNCTION ferry.message_group_lock(p_queue bigint, p_ids bigint[]) RETURNS bigint
    LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
BEGIN
    SELECT /* ferry:message_group_lock */ count(pg_advisory_xact_lock(k)) INTO v_n FROM (
        SELECT DISTINCT ferry.group_lock_key(p_queue, m.grp) AS k
        FROM unnest(p_ids) AS r(id)
        CROSS JOIN LATERAL (
            SELECT x.grp FROM ferry.messages x WHERE x.queue_id = p_queue AND x.id = r.id LIMIT 1
        ) m
        WHERE m.grp IS NOT NULL
        ORDER BY k
    ) locks;
    RETURN v_n;
END $$;
REVOKE ALL ON FUNCTION ferry.message_group_lock(bigint, bigint[]) FROM PUBLIC;

-- One claim pass (store.messageClaimOnce): leases up to p_limit visible
-- messages of the queue, and returns as exhausted (o_exhausted, o_id only)
-- the candidates whose receive_count reached p_max_receives. With
-- p_owner, the claim is fenced by that owner's push lease
-- (store.PushLeaseClaim), and a lost lease is one row of NULLs.
CREATE FUNCTION ferry.message_claim(p_queue bigint, p_limit integer, p_max_receives integer, p_timeout_ms bigint,
        p_owner uuid DEFAULT NULL)
    RETURNS TABLE(o_exhausted boolean, o_id bigint, o_body text, o_attributes text, o_grp text, o_dedup_id text,
        o_event_id text, o_claim_token bigint, o_receive_count integer, o_sent_at timestamptz)
    LANGUAGE plpgsql AS $$
DECLARE
    v_at timestamptz := clock_timestamp();
BEGIN
    IF p_owner IS NULL THEN
        RETURN QUERY WITH /* ferry:message_claim */ candidate AS (
                SELECT m.ctid, m.id, m.receive_count >= p_max_receives AS exhausted
                FROM ferry.messages m
                WHERE m.queue_id = p_queue AND NOT m.waiting AND m.visible_at <= v_at
                ORDER BY m.visible_at, m.id
                LIMIT p_limit
                FOR UPDATE SKIP LOCKED
            ),
            claimed AS (
                UPDATE ferry.messages m SET
                    visible_at = clock_timestamp() + p_timeout_ms * interval '1 millisecond',
                    receive_count = m.receive_count + 1,
                    claim_token = (random() * 9007199254740991)::bigint
                FROM candidate c WHERE m.ctid = c.ctid AND NOT c.exhausted
                RETURNING m.id, m.body, m.attributes, m.grp, m.dedup_id, m.event_id, m.claim_token, m.receive_count, m.sent_at
            )
            SELECT false, cl.id, cl.body::text, cl.attributes::text, cl.grp, cl.dedup_id, cl.event_id, cl.claim_token,
                cl.receive_count, cl.sent_at FROM claimed cl
            UNION ALL
            SELECT true, c.id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM candidate c WHERE c.exhausted;
        RETURN;
    END IF;
    -- Fenced: the lease is share-locked only when a message is claimable
    -- (head: one probe of the claim index), before any message is locked;
    -- with nothing to claim it is only read (live), so an idle worker's
    -- poll writes nothing. Lost: the lease is neither locked nor live.
    RETURN QUERY WITH /* ferry:message_claim_fenced */ head AS MATERIALIZED (
            SELECT 1 FROM ferry.messages h
            WHERE h.queue_id = p_queue AND NOT h.waiting AND h.visible_at <= v_at
            ORDER BY h.visible_at, h.id
            LIMIT 1
        ),
        lease AS MATERIALIZED (
            SELECT 1 FROM ferry.push_leases l
            WHERE l.queue_id = p_queue AND l.owner = p_owner AND l.expires_at > clock_timestamp() AND EXISTS (SELECT 1 FROM head)
            FOR SHARE
        ),
        live AS MATERIALIZED (
            SELECT 1 FROM ferry.push_leases l
            WHERE l.queue_id = p_queue AND l.owner = p_owner AND l.expires_at > clock_timestamp() AND NOT EXISTS (SELECT 1 FROM head)
        ),
        candidate AS (
            SELECT m.ctid, m.id, m.receive_count >= p_max_receives AS exhausted
            FROM ferry.messages m
            WHERE m.queue_id = p_queue AND NOT m.waiting AND m.visible_at <= v_at AND EXISTS (SELECT 1 FROM lease)
            ORDER BY m.visible_at, m.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ),
        claimed AS (
            UPDATE ferry.messages m SET
                visible_at = clock_timestamp() + p_timeout_ms * interval '1 millisecond',
                receive_count = m.receive_count + 1,
                claim_token = (random() * 9007199254740991)::bigint
            FROM candidate c WHERE m.ctid = c.ctid AND NOT c.exhausted
            RETURNING m.id, m.body, m.attributes, m.grp, m.dedup_id, m.event_id, m.claim_token, m.receive_count, m.sent_at
        )
        SELECT false, cl.id, cl.body::text, cl.attributes::text, cl.grp, cl.dedup_id, cl.event_id, cl.claim_token,
            cl.receive_count, cl.sent_at FROM claimed cl
        UNION ALL
        SELECT true, c.id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM candidate c WHERE c.exhausted
        UNION ALL
        SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        WHERE NOT EXISTS (SELECT 1 FROM lease) AND NOT EXISTS (SELECT 1 FROM live);
END $$;
REVOKE ALL ON FUNCTION ferry.message_claim(bigint, integer, integer, bigint, uuid) FROM PUBLIC;

-- The promotion of a group's next message, written once: the engine's
-- dead letter, ack and nack below and the store's deletes
-- (store/deleteset.go: purge, retention, seek) all call it.
--
-- The rows that left a queue (p_queues, p_groups, p_ids: each row's
-- queue_id, grp and id; rows without a group are ignored) make the oldest
-- waiting message of each group that lost its head the new head; returns
-- how many it promoted. Per group, the next message is one probe of the
-- group index in id order (LIMIT 1, skipping the rows that left), and a
-- head still there is another (a LATERAL with LIMIT: NOT EXISTS may be
-- planned as an anti-join over the queue's heads). The queue ids come from
-- the rows, not from a constant, so that no estimate of the queue's size
-- makes walking the queue (or the group) look cheaper than those probes
-- (DESIGN.md invariant 11; store/plans_queue_test.go attacks its plan in
-- every case that promotes). The rows that left are skipped by id, so the
-- result does not depend on whether the caller's statement still sees
-- them. The caller holds the groups' locks (ferry.message_group_lock,
-- store.messageDeleteSet), so the waiting rows found cannot change before
-- the UPDATE finds them by ctid. Not granted to anyone.
--
-- Its callers run it from the statement that removes the rows, as the CTE
--     promoted AS (
--         SELECT CASE WHEN count(*) > 0 THEN ferry.message_promote(array_agg(queue_id), array_agg(grp), array_agg(id)) ELSE 0 END AS n
--         FROM gone WHERE grp IS NOT NULL
--     )
-- over the removing CTE "gone": no round trip and no statement more, and
-- when no row that left had a group (an ungrouped ack) the function is not
-- called at all. The aggregate reads all of "gone" (the DELETE has run to
-- its end) before the call. A CTE that is a SELECT runs only if the
-- statement reads it: each caller's final SELECT reads "promoted" (one
-- row, n) after "gone".
-- (PL/pgSQL, not SQL: a SQL function's statement would be planned again
-- at every call.)
CREATE FUNCTION ferry.message_promote(p_queues bigint[], p_groups text[], p_ids bigint[]) RETURNS bigint
    LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
BEGIN
    WITH /* ferry:message_promote */ promoted AS (
        UPDATE ferry.messages n SET waiting = false, visible_at = greatest(n.visible_at, now())
        FROM (
            SELECT nx.ctid
            FROM (
                SELECT DISTINCT l.queue_id, l.grp FROM unnest(p_queues, p_groups) AS l(queue_id, grp)
                WHERE l.grp IS NOT NULL
            ) g
            CROSS JOIN LATERAL (
                SELECT w.ctid FROM ferry.messages w
                WHERE w.queue_id = g.queue_id AND w.grp = g.grp AND w.waiting AND w.id NOT IN (SELECT unnest(p_ids))
                ORDER BY w.id LIMIT 1
            ) nx
            LEFT JOIN LATERAL (
                SELECT true AS found FROM ferry.messages h
                WHERE h.queue_id = g.queue_id AND h.grp = g.grp AND NOT h.waiting AND h.id NOT IN (SELECT unnest(p_ids))
                LIMIT 1
            ) head ON true
            WHERE head.found IS NULL
        ) p
        WHERE n.ctid = p.ctid AND n.waiting
        RETURNING n.id
    )
    SELECT count(*) INTO v_n FROM promoted;
    RETURN v_n;
END $$;
REVOKE ALL ON FUNCTION ferry.message_promote(bigint[], text[], bigint[]) FROM PUBLIC;

-- Moves the given messages to the dead letters if they are still
-- exhausted (available, received at least p_max_receives times: checked
-- again under the lock), promoting the next message of their groups;
-- returns how many it moved (store.messageDeadLetter).
CREATE FUNCTION ferry.message_dead_letter(p_queue bigint, p_ids bigint[], p_max_receives integer) RETURNS bigint
    LANGUAGE plpgsql AS $$
DECLARE
    v_at timestamptz := clock_timestamp();
    v_n bigint;
BEGIN
    PERFORM ferry.message_group_lock(p_queue, p_ids);
    WITH /* ferry:message_dead_letter */ target AS MATERIALIZED (
        SELECT m.queue_id, m.id FROM unnest(p_ids) AS r(id)
        CROSS JOIN LATERAL (
            SELECT x.queue_id, x.id FROM ferry.messages x WHERE x.queue_id = p_queue AND x.id = r.id LIMIT 1
        ) m
        LIMIT cardinality(p_ids)
    ),
    gone AS (
        DELETE FROM ferry.messages m USING target t WHERE m.queue_id = t.queue_id AND m.id = t.id
            AND NOT m.waiting AND m.visible_at <= v_at AND m.receive_count >= p_max_receives
        RETURNING m.*
    ),
    dead AS (
        INSERT INTO ferry.dead_letters (queue_id, id, sent_at, receive_count, grp, dedup_id, event_id, event_partition, event_offset, last_error, attributes, body)
        SELECT queue_id, id, sent_at, receive_count, grp, dedup_id, event_id, event_partition, event_offset, last_error, attributes, body FROM gone
    ),
    promoted AS (
        SELECT CASE WHEN count(*) > 0 THEN ferry.message_promote(array_agg(queue_id), array_agg(grp), array_agg(id)) ELSE 0 END AS n
        FROM gone WHERE grp IS NOT NULL
    )
    SELECT count(*) INTO v_n FROM gone, promoted;
    RETURN v_n;
END $$;
REVOKE ALL ON FUNCTION ferry.message_dead_letter(bigint, bigint[], integer) FROM PUBLIC;

-- Deletes the messages whose receipts (p_ids, p_tokens) are current and
-- promotes the next message of their groups (store.MessageAck); returns
-- (id, token) per applied receipt, and (-1, n) when it promoted n > 0
-- messages. p_grouped false skips the group locks (the caller knows the
-- messages have no group).
CREATE FUNCTION ferry.message_ack(p_queue bigint, p_ids bigint[], p_tokens bigint[], p_grouped boolean)
    RETURNS TABLE(o_id bigint, o_token bigint)
    LANGUAGE plpgsql AS $$
DECLARE
    v_at timestamptz := clock_timestamp();
BEGIN
    IF p_grouped THEN
        PERFORM ferry.message_group_lock(p_queue, p_ids);
    END IF;
    RETURN QUERY WITH /* ferry:message_ack */ target AS MATERIALIZED (
            SELECT m.queue_id, m.id, m.claim_token FROM unnest(p_ids, p_tokens) AS r(id, token)
            CROSS JOIN LATERAL (
                SELECT x.queue_id, x.id, x.claim_token, x.visible_at FROM ferry.messages x
                WHERE x.queue_id = p_queue AND x.id = r.id LIMIT 1
            ) m
            WHERE m.claim_token = r.token AND m.visible_at > v_at
            LIMIT cardinality(p_ids)
        ),
        gone AS (
            DELETE FROM ferry.messages m USING target t
            WHERE m.queue_id = t.queue_id AND m.id = t.id AND m.claim_token = t.claim_token AND m.visible_at > v_at
            RETURNING m.queue_id, m.id, m.grp, m.claim_token
        ),
        promoted AS (
            SELECT CASE WHEN count(*) > 0 THEN ferry.message_promote(array_agg(queue_id), array_agg(grp), array_agg(id)) ELSE 0 END AS n
            FROM gone WHERE grp IS NOT NULL
        )
        SELECT gn.id, gn.claim_token FROM gone gn
        UNION ALL SELECT -1, p.n FROM promoted p WHERE p.n > 0;
END $$;
REVOKE ALL ON FUNCTION ferry.message_ack(bigint, bigint[], bigint[], boolean) FROM PUBLIC;

-- Releases the leases of current receipts (store.MessageNack): visible
-- again after p_delay_ms (NULL: the queue's exponential backoff with
-- jitter), or dead-lettered at once with p_dead_letter or on the last
-- allowed receive; promotes the next message of groups that lost their
-- head. Returns (id, token, dead) per applied receipt. The targets are
-- locked as they are found (FOR UPDATE in the probe returns the newest
-- version of the row, then checked for the lease).
CREATE FUNCTION ferry.message_nack(p_queue bigint, p_ids bigint[], p_tokens bigint[], p_dead_letter boolean,
        p_max_receives integer, p_error text, p_delay_ms bigint, p_retry_min integer, p_retry_max integer)
    RETURNS TABLE(o_id bigint, o_token bigint, o_dead boolean)
    LANGUAGE plpgsql AS $$
DECLARE
    v_at timestamptz := clock_timestamp();
BEGIN
    PERFORM ferry.message_group_lock(p_queue, p_ids);
    RETURN QUERY WITH /* ferry:message_nack */ target AS MATERIALIZED (
            SELECT m.queue_id, m.id, m.claim_token, (p_dead_letter OR m.receive_count >= p_max_receives) AS dead
            FROM unnest(p_ids, p_tokens) AS r(id, token)
            CROSS JOIN LATERAL (
                SELECT x.queue_id, x.id, x.claim_token, x.visible_at, x.receive_count FROM ferry.messages x
                WHERE x.queue_id = p_queue AND x.id = r.id LIMIT 1
                FOR UPDATE
            ) m
            WHERE m.claim_token = r.token AND m.visible_at > v_at
            LIMIT cardinality(p_ids)
        ),
        released AS (
            UPDATE ferry.messages m SET
                claim_token = NULL,
                last_error = coalesce(p_error, m.last_error),
                visible_at = v_at + coalesce(p_delay_ms * interval '1 millisecond',
                    -- exponential backoff with equal jitter: half fixed, half random
                    make_interval(secs => least(p_retry_max::float8, p_retry_min::float8 * power(2, least(m.receive_count - 1, 30)))
                        * (0.5 + random() / 2)))
            FROM target t WHERE m.queue_id = t.queue_id AND m.id = t.id AND NOT t.dead
                AND m.claim_token = t.claim_token AND m.visible_at > v_at
            RETURNING m.id, t.claim_token
        ),
        gone AS (
            DELETE FROM ferry.messages m USING target t
            WHERE m.queue_id = t.queue_id AND m.id = t.id AND t.dead AND m.claim_token = t.claim_token AND m.visible_at > v_at
            RETURNING m.*, t.claim_token AS receipt_token
        ),
        dead AS (
            INSERT INTO ferry.dead_letters (queue_id, id, sent_at, receive_count, grp, dedup_id, event_id, event_partition, event_offset, last_error, attributes, body)
            SELECT queue_id, id, sent_at, receive_count, grp, dedup_id, event_id, event_partition, event_offset, coalesce(p_error, last_error), attributes, body FROM gone
        ),
        promoted AS (
            SELECT CASE WHEN count(*) > 0 THEN ferry.message_promote(array_agg(queue_id), array_agg(grp), array_agg(id)) ELSE 0 END AS n
            FROM gone WHERE grp IS NOT NULL
        )
        SELECT rl.id, rl.claim_token, false FROM released rl
        UNION ALL SELECT gn.id, gn.receipt_token, true FROM gone gn, promoted;
END $$;
REVOKE ALL ON FUNCTION ferry.message_nack(bigint, bigint[], bigint[], boolean, integer, text, bigint, integer, integer) FROM PUBLIC;

-- Moves the lease of current receipts to now + p_timeout_ms
-- (store.MessageExtend); returns (id, token) per applied receipt.
CREATE FUNCTION ferry.message_extend(p_queue bigint, p_ids bigint[], p_tokens bigint[], p_timeout_ms bigint)
    RETURNS TABLE(o_id bigint, o_token bigint)
    LANGUAGE plpgsql AS $$
DECLARE
    v_at timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY WITH /* ferry:message_extend */ target AS MATERIALIZED (
            SELECT m.queue_id, m.id, m.claim_token FROM unnest(p_ids, p_tokens) AS r(id, token)
            CROSS JOIN LATERAL (
                SELECT x.queue_id, x.id, x.claim_token, x.visible_at FROM ferry.messages x
                WHERE x.queue_id = p_queue AND x.id = r.id LIMIT 1
            ) m
            WHERE m.claim_token = r.token AND m.visible_at > v_at
            LIMIT cardinality(p_ids)
        )
        UPDATE ferry.messages m SET visible_at = clock_timestamp() + p_timeout_ms * interval '1 millisecond'
        FROM target t
        WHERE m.queue_id = t.queue_id AND m.id = t.id AND m.claim_token = t.claim_token AND m.visible_at > v_at
        RETURNING m.id, m.claim_token;
END $$;
REVOKE ALL ON FUNCTION ferry.message_extend(bigint, bigint[], bigint[], bigint) FROM PUBLIC;

-- Receipts are store.Receipt's encoding: base64url without padding of the
-- message id and the claim token, each 8 bytes big-endian. Decoding is as
-- strict as store.ParseReceipt: exactly 22 characters of the alphabet,
-- the last one without stray bits (anything else decodes to NULLs).
CREATE FUNCTION ferry.receipt_encode(p_id bigint, p_token bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT rtrim(translate(encode(int8send(p_id) || int8send(p_token), 'base64'), '+/', '-_'), '=')
$$;
REVOKE ALL ON FUNCTION ferry.receipt_encode(bigint, bigint) FROM PUBLIC;

-- (A set-returning SQL function, none for a malformed receipt, so that
-- the planner inlines it where it is used.)
CREATE FUNCTION ferry.receipt_decode(p_receipt text) RETURNS TABLE(id bigint, token bigint)
    LANGUAGE sql IMMUTABLE AS $$
    SELECT ('x' || encode(substr(d.b, 1, 8), 'hex'))::bit(64)::bigint, ('x' || encode(substr(d.b, 9, 8), 'hex'))::bit(64)::bigint
    FROM (
        -- CASE: decode() must never see what the pattern refuses.
        SELECT CASE WHEN p_receipt ~ '^[A-Za-z0-9_-]{21}[AQgw]$' COLLATE "C"
            THEN decode(translate(p_receipt, '-_', '+/') || '==', 'base64') END AS b
    ) d
    WHERE d.b IS NOT NULL
$$;
REVOKE ALL ON FUNCTION ferry.receipt_decode(text) FROM PUBLIC;

-- Raises the REST answer to invalid fields: one field's message, or, like
-- handlers' checks, "n invalid fields; first: ...".
CREATE FUNCTION ferry.consumer_invalid(p_errors text[]) RETURNS void
    LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(p_errors) = 1 THEN
        PERFORM ferry.raise(400, 'invalid_request', p_errors[1]);
    ELSIF cardinality(p_errors) > 1 THEN
        PERFORM ferry.raise(400, 'invalid_request', format('%s invalid fields; first: %s', cardinality(p_errors), p_errors[1]));
    END IF;
END $$;
REVOKE ALL ON FUNCTION ferry.consumer_invalid(text[]) FROM PUBLIC;

-- Checks a consumer target's names as the REST routes do ("queue", or
-- "topic/sub"); with p_resolve, returns the queue or subscription row
-- (FR404 when there is none).
CREATE FUNCTION ferry.consumer_target(p_target text, p_resolve boolean) RETURNS ferry.queues
    LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_re constant text := '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$';
    v_slash integer := strpos(p_target, '/');
    v_topic text := left(p_target, v_slash - 1);
    v_sub text := substr(p_target, v_slash + 1);
    v_q ferry.queues;
BEGIN
    IF p_target IS NULL THEN
        PERFORM ferry.raise(400, 'invalid_request', 'target: is required');
    ELSIF v_slash = 0 AND p_target !~ v_re COLLATE "C" THEN
        PERFORM ferry.raise(400, 'invalid_request', 'queue: must match ' || v_re);
    ELSIF v_slash > 0 AND v_topic !~ v_re COLLATE "C" THEN
        PERFORM ferry.raise(400, 'invalid_request', 'topic: must match ' || v_re);
    ELSIF v_slash > 0 AND v_sub !~ v_re COLLATE "C" THEN
        PERFORM ferry.raise(400, 'invalid_request', 'sub: must match ' || v_re);
    END IF;
    IF NOT p_resolve THEN
        RETURN NULL;
    END IF;
    IF v_slash = 0 THEN
        SELECT * INTO v_q FROM ferry.queues q WHERE q.name = p_target AND q.topic_id IS NULL;
    ELSE
        SELECT s.* INTO v_q FROM ferry.topics t JOIN ferry.queues s ON s.topic_id = t.id AND s.name = v_sub
        WHERE t.name = v_topic;
    END IF;
    IF v_q.id IS NULL THEN
        PERFORM ferry.raise(404, 'not_found', 'no such resource');
    END IF;
    RETURN v_q;
END $$;
REVOKE ALL ON FUNCTION ferry.consumer_target(text, boolean) FROM PUBLIC;

-- Decodes a list of receipts as REST's ack, nack and extend do: required,
-- not empty, at most sql_limits.max_batch (FR413), each one issued by
-- Ferry.
CREATE FUNCTION ferry.consumer_receipts(p_receipts text[], OUT ids bigint[], OUT tokens bigint[])
    LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_max integer := (SELECT l.max_batch FROM ferry.sql_limits l);
    v_n integer := cardinality(p_receipts);
    v_bad integer;
BEGIN
    IF p_receipts IS NULL THEN
        PERFORM ferry.raise(400, 'invalid_request', 'receipts: is required');
    ELSIF array_ndims(p_receipts) > 1 THEN
        PERFORM ferry.raise(400, 'invalid_request', 'receipts: must be an array of strings');
    ELSIF v_n = 0 THEN
        PERFORM ferry.raise(400, 'invalid_request', 'receipts: must not be empty');
    ELSIF v_n > v_max THEN
        PERFORM ferry.raise(413, 'payload_too_large', format('a batch holds at most %s receipts, not %s', v_max, v_n));
    END IF;
    SELECT array_agg(d.id ORDER BY r.i), array_agg(d.token ORDER BY r.i), min(r.i) FILTER (WHERE d.id IS NULL)
    INTO ids, tokens, v_bad
    FROM unnest(p_receipts) WITH ORDINALITY AS r(s, i)
    LEFT JOIN LATERAL ferry.receipt_decode(r.s) d ON true;
    IF v_bad IS NOT NULL THEN
        PERFORM ferry.raise(400, 'invalid_request', format('receipts[%s]: is not a receipt issued by Ferry', v_bad - 1));
    END IF;
END $$;
REVOKE ALL ON FUNCTION ferry.consumer_receipts(text[]) FROM PUBLIC;

-- One result row per receipt, in order: ok when the operation applied it
-- (its message id is in p_applied_ids with the receipt's token).
CREATE FUNCTION ferry.consumer_results(p_receipts text[], p_ids bigint[], p_tokens bigint[],
        p_applied_ids bigint[], p_applied_tokens bigint[])
    RETURNS TABLE(receipt text, status text)
    LANGUAGE sql STABLE AS $$
    SELECT r.s, CASE WHEN EXISTS (
            SELECT 1 FROM unnest(p_applied_ids, p_applied_tokens) AS a(id, token) WHERE a.id = r.id AND a.token = r.token
        ) THEN 'ok' ELSE 'stale' END
    FROM unnest(p_receipts, p_ids, p_tokens) WITH ORDINALITY AS r(s, id, token, i)
    ORDER BY r.i
$$;
REVOKE ALL ON FUNCTION ferry.consumer_results(text[], bigint[], bigint[], bigint[], bigint[]) FROM PUBLIC;

-- ferry.receive (API.md § SQL API): claims up to max_messages of the
-- queue or subscription in the caller's transaction, as POST .../receive
-- does without wait_seconds (it never waits), dead-lettering what has had
-- its max_receives in up to three passes (store.MessageClaim). The leases
-- are the rows' locks too until the caller commits: another consumer
-- never gets them meanwhile, even after visible_at. Dead-lettering takes
-- the group locks of the exhausted messages' groups, held until the
-- caller commits: a send to such a group waits for that commit. (The
-- claim locked those messages first, so here, unlike in the store's
-- autocommit passes, a row lock comes before a group lock: a concurrent
-- dead-lettering of the same message can end in a deadlock error, which
-- reaches the caller like any deadlock: retry the transaction.) A push
-- queue or subscription can be received from, as over REST. For a
-- subscription, id is the event id, body the event object (the shape of
-- GET .../events) and attributes the event's.
CREATE FUNCTION ferry.receive(target text, max_messages integer DEFAULT 1, visibility_timeout_seconds integer DEFAULT NULL)
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
REVOKE ALL ON FUNCTION ferry.receive(text, integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.receive(text, integer, integer) TO ferry_consumer;

-- ferry.ack: POST .../ack in the caller's transaction. Its group locks
-- (messages of a group only) are held until the caller commits: a send to
-- the group of an acked message waits for that commit.
CREATE FUNCTION ferry.ack(target text, receipts text[])
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
REVOKE ALL ON FUNCTION ferry.ack(text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.ack(text, text[]) TO ferry_consumer;

-- Reads ferry.nack's options as REST reads a nack's body members
-- (delay_seconds, error, dead_letter; null = absent): unknown members and
-- wrong types first, then ranges.
CREATE FUNCTION ferry.consumer_nack_options(p_options jsonb, OUT delay_ms bigint, OUT error text, OUT dead_letter boolean)
    LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_key text;
    v_delay jsonb := p_options -> 'delay_seconds';
    v_error jsonb := p_options -> 'error';
    v_dead jsonb := p_options -> 'dead_letter';
BEGIN
    dead_letter := false;
    IF p_options IS NULL OR p_options = 'null' THEN
        RETURN;
    ELSIF jsonb_typeof(p_options) <> 'object' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'options: must be an object, not ' || jsonb_typeof(p_options));
    END IF;
    FOR v_key IN SELECT k FROM jsonb_object_keys(p_options) AS k LOOP
        IF v_key NOT IN ('delay_seconds', 'error', 'dead_letter') THEN
            PERFORM ferry.raise(400, 'invalid_request', v_key || ': unknown field (member names are case-sensitive)');
        END IF;
    END LOOP;
    IF jsonb_typeof(v_delay) = 'number' AND v_delay::text !~ '^-?[0-9]+$' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'delay_seconds: must be an integer in range, not number ' || v_delay::text);
    ELSIF jsonb_typeof(v_delay) NOT IN ('number', 'null') THEN
        PERFORM ferry.raise(400, 'invalid_request', 'delay_seconds: must be an integer in range, not ' || jsonb_typeof(v_delay));
    ELSIF jsonb_typeof(v_error) NOT IN ('string', 'null') THEN
        PERFORM ferry.raise(400, 'invalid_request', 'error: must be a string, not ' || jsonb_typeof(v_error));
    ELSIF jsonb_typeof(v_dead) NOT IN ('boolean', 'null') THEN
        PERFORM ferry.raise(400, 'invalid_request', 'dead_letter: must be a boolean, not ' || jsonb_typeof(v_dead));
    END IF;
    dead_letter := coalesce((v_dead #>> '{}')::boolean, false);
    error := v_error #>> '{}';
    IF jsonb_typeof(v_delay) = 'number' THEN
        IF length(v_delay::text) > 6 OR (v_delay::text)::integer NOT BETWEEN 0 AND 43200 THEN
            delay_ms := -1;
        ELSE
            delay_ms := 1000::bigint * (v_delay::text)::integer;
        END IF;
    END IF;
END $$;
REVOKE ALL ON FUNCTION ferry.consumer_nack_options(jsonb) FROM PUBLIC;

-- ferry.nack: POST .../nack in the caller's transaction (options
-- delay_seconds, error, dead_letter). Its group locks are held until the
-- caller commits, like ferry.ack's.
CREATE FUNCTION ferry.nack(target text, receipts text[], options jsonb DEFAULT '{}')
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
REVOKE ALL ON FUNCTION ferry.nack(text, text[], jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.nack(text, text[], jsonb) TO ferry_consumer;

-- ferry.extend: POST .../extend in the caller's transaction.
CREATE FUNCTION ferry.extend(target text, receipts text[], visibility_timeout_seconds integer)
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
REVOKE ALL ON FUNCTION ferry.extend(text, text[], integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.extend(text, text[], integer) TO ferry_consumer;

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
    -- What this transaction sent and removed before is counted at its
    -- commit only (ferry.at_commit): it takes room now.
    depth := depth + (SELECT coalesce(sum(a.messages), 0) FROM ferry.at_commit a
        WHERE a.xact = pg_current_xact_id() AND a.key = q.id);
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
        PERFORM ferry.wake_at_commit(q.id);
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

-- A SQL publish cannot hold its partitions' row locks until the caller
-- commits (the caller's transaction may stay open for minutes, and every
-- publish to those partitions would wait for it). So ferry.publish only
-- validates, chooses each event's id and partition, claims the id in
-- ferry.event_dedup (offset -2: committed but not appended yet) and
-- records the event here, in the caller's transaction; its NOTIFY, which
-- the commit delivers, wakes the outbox relay of every Ferry instance
-- (store/relay.go), which appends committed pending events to the log in
-- seq order, per topic one instance at a time, through the publish engine
-- REST uses (fan-out included), deleting them in the same transaction.
-- No foreign key to ferry.topics: it would have the caller's transaction
-- hold a lock on the topic's row to its end; the relay drops the events
-- of a topic that is gone.
CREATE TABLE ferry.event_pending (
    seq        bigint  PRIMARY KEY,
    topic_id   bigint  NOT NULL,
    partition  integer NOT NULL,
    id         text    NOT NULL,
    type       text    NOT NULL,
    key        text,
    data       jsonb,
    attributes jsonb
);
CREATE INDEX event_pending_topic_idx ON ferry.event_pending (topic_id, seq);
CREATE SEQUENCE ferry.event_pending_seq;
-- Keyless events are spread over the partitions by this sequence.
CREATE SEQUENCE ferry.event_spread_seq;
REVOKE ALL ON ferry.event_pending FROM PUBLIC;

-- The partition of a keyed event: FNV-1a 32-bit of the key's UTF-8 bytes,
-- as an unsigned integer, modulo the partitions (store.PartitionForKey).
CREATE FUNCTION ferry.partition_for_key(key text, partitions integer) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    b bytea := convert_to(key, 'UTF8');
    h bigint := 2166136261;
BEGIN
    FOR i IN 0 .. length(b) - 1 LOOP
        h := ((h # get_byte(b, i)) * 16777619) & 4294967295;
    END LOOP;
    RETURN (h % partitions)::integer;
END $$;
REVOKE ALL ON FUNCTION ferry.partition_for_key(text, integer) FROM PUBLIC;

-- The size of j as compact JSON text (jsonb writes a space after each ':'
-- and ','; strings are kept whole): what REST counts against the body
-- limit.
CREATE FUNCTION ferry.json_compact_size(j jsonb) RETURNS bigint LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT octet_length(t) - (length(s) - length(replace(s, ' ', '')))
    FROM (SELECT j::text AS t) a
    CROSS JOIN LATERAL (SELECT regexp_replace(a.t, E'"(\\\\.|[^"\\\\])*"', '', 'g') AS s) b
$$;
REVOKE ALL ON FUNCTION ferry.json_compact_size(jsonb) FROM PUBLIC;

-- Whether v is a W3C trace context traceparent (jobs.ValidTraceparent).
CREATE FUNCTION ferry.valid_traceparent(v text) RETURNS boolean LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT v ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[!-~]*)?$'
        AND left(v, 2) <> 'ff'
        AND substr(v, 4, 32) <> repeat('0', 32)
        AND substr(v, 37, 16) <> repeat('0', 16)
        AND (octet_length(v) = 55 OR left(v, 2) <> '00')
$$;
REVOKE ALL ON FUNCTION ferry.valid_traceparent(text) FROM PUBLIC;

-- The JSON kind of v as REST's messages name it ("must be a string, not
-- number").
CREATE FUNCTION ferry.publish_kind(v jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE jsonb_typeof(v) WHEN 'boolean' THEN 'bool' ELSE jsonb_typeof(v) END
$$;
REVOKE ALL ON FUNCTION ferry.publish_kind(jsonb) FROM PUBLIC;

-- The shape of a publish's events, as REST's decoder checks it: an array
-- of objects with only the members id, type, key, data, attributes (or,
-- for ferry.publish, options with id, key, attributes), each of its
-- type. Raises FR400 at the first mistake, FR413 over the batch limit.
-- Members are named as REST names them, with the event's index where
-- REST's decoder cannot give it ("events[3].type: must be a string").
CREATE FUNCTION ferry.publish_check_shape(events jsonb, single boolean) RETURNS void LANGUAGE plpgsql AS $$
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
REVOKE ALL ON FUNCTION ferry.publish_check_shape(jsonb, boolean) FROM PUBLIC;

-- The field checks of a publish's events, as REST's (handlers/topics.go
-- toPublishEvents): id, type and key 1-256 bytes of text (type required),
-- attributes' keys 1-256 bytes and values at most 4096, a valid
-- traceparent, and data with attributes within the body limit (FR413 at
-- the first event over it). Every mistake is collected, and the first
-- named, as REST does.
CREATE FUNCTION ferry.publish_check_fields(events jsonb, single boolean) RETURNS void LANGUAGE plpgsql AS $$
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
CREATE FUNCTION ferry.publish_events(topic_name text, events jsonb, single boolean)
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
REVOKE ALL ON FUNCTION ferry.publish_events(text, jsonb, boolean) FROM PUBLIC;

-- Claims the ids (with their partitions) for topic t as pending (offset
-- -2, no expiry until the relay appends them) and returns those claimed
-- now. An id already claimed is a duplicate: its row is not touched, so
-- not locked (the relay must be able to append it while this caller's
-- transaction is open), unless its window has ended, and then it is
-- taken over. An insert that meets another producer's uncommitted claim
-- of the same id waits for it.
CREATE FUNCTION ferry.publish_claim(t ferry.topics, ids text[], parts integer[]) RETURNS text[] LANGUAGE plpgsql AS $$
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
CREATE FUNCTION ferry.publish(topic text, type text, data jsonb, options jsonb DEFAULT '{}')
    RETURNS TABLE(id text, "partition" integer, duplicate boolean)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
BEGIN
    IF options IS NULL OR jsonb_typeof(options) = 'null' THEN
        options := '{}';
    ELSIF jsonb_typeof(options) <> 'object' THEN
        PERFORM ferry.raise(400, 'invalid_request', 'options: must be an object, not ' || ferry.publish_kind(options));
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
CREATE FUNCTION ferry.publish_batch(topic text, events jsonb)
    RETURNS TABLE(id text, "partition" integer, duplicate boolean)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = ferry, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM ferry.publish_events(topic, events, false);
END $$;
REVOKE ALL ON FUNCTION ferry.publish_batch(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.publish_batch(text, jsonb) TO ferry_producer;
