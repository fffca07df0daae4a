-- The statements that write a send, shared by both faces: REST's Sender
-- (store.Sender) calls these functions in its group-commit
-- transactions, and ferry.send/ferry.send_batch call them in the caller's
-- transaction. One text per statement, so the two cannot drift. They are
-- the shapes that are robust to generic plans (DESIGN.md invariant 11;
-- the store's send plan explains them), kept verbatim: PL/pgSQL caches their
-- plans per connection like prepared statements, custom first, generic
-- after five calls, and the plan tests (store/plans_queue_test.go) attack
-- them through both faces. Internal: executable by nobody but Ferry.

-- The INSERT of messages with no group and no dedup id; ids come from the
-- sequence in input order (the i-th smallest id returned is the i-th
-- message). It writes nothing if the queue no longer exists.
CREATE OR REPLACE FUNCTION ferry.message_send_plain(queue_id bigint, bodies text[], attrs text[], delays_ms bigint[],
    deliver_at timestamptz[]) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY INSERT /* ferry:message_send */ INTO ferry.messages (queue_id, id, visible_at, part, attributes, body)
        SELECT $1, nextval('ferry.message_id_seq'), t.at, ferry.message_part(t.at, now()), attributes::json, body::json
        FROM unnest($2::text[], $3::text[], $4::bigint[], $5::timestamptz[]) AS u(body, attributes, delay_ms, deliver_at)
        CROSS JOIN LATERAL (SELECT coalesce(u.deliver_at, now() + u.delay_ms * interval '1 millisecond') AS at) t
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
CREATE OR REPLACE FUNCTION ferry.message_send_grouped(queue_id bigint, bodies text[], attrs text[], groups text[], dedup_ids text[],
    delays_ms bigint[], deliver_at timestamptz[], dedup_window_seconds integer)
    RETURNS TABLE(ord bigint, id bigint, inserted boolean) LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off AS $$
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
            INSERT INTO ferry.messages (queue_id, id, part, visible_at, waiting, grp, dedup_id, attributes, body)
            SELECT $1, id,
                ferry.message_part(coalesce(deliver_at, now() + delay_ms * interval '1 millisecond'), now()),
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
-- the message that holds each dedup id. (This and message_send_dedup_live
-- turn sequential scans off: a generic plan made after an ANALYZE found
-- ferry.dedup empty read it whole per dedup id; TestPlansQueueSend.) The rows that beat the send are
-- committed (ON CONFLICT waited for them), so this statement's snapshot
-- sees them, and no sweep or takeover can change them before it reads.
CREATE OR REPLACE FUNCTION ferry.message_send_dedup_answer(queue_id bigint, dedup_ids text[])
    RETURNS TABLE(dedup_id text, message_id bigint) LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off AS $$
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
CREATE OR REPLACE FUNCTION ferry.message_send_depth_lock(queue_ids bigint[]) RETURNS TABLE(queue_id bigint, depth bigint)
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
CREATE OR REPLACE FUNCTION ferry.message_send_dedup_live(queue_id bigint, dedup_ids text[]) RETURNS SETOF text
    LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off AS $$
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
