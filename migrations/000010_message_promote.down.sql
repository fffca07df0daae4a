-- Restores the texts of migration 000009 of the three functions that
-- remove group heads (each with the promotion of their groups' next
-- messages written out again), then drops ferry.message_promote, which
-- they no longer call.

CREATE OR REPLACE FUNCTION ferry.message_dead_letter(p_queue bigint, p_ids bigint[], p_max_receives integer) RETURNS bigint
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
        UPDATE ferry.messages n SET waiting = false, visible_at = greatest(n.visible_at, now())
        FROM (
            SELECT nx.ctid
            FROM (SELECT DISTINCT queue_id, grp FROM gone WHERE grp IS NOT NULL) g
            CROSS JOIN LATERAL (
                SELECT w.ctid FROM ferry.messages w
                WHERE w.queue_id = g.queue_id AND w.grp = g.grp AND w.waiting AND w.id NOT IN (SELECT id FROM gone)
                ORDER BY w.id LIMIT 1
            ) nx
            LEFT JOIN LATERAL (
                SELECT true AS found FROM ferry.messages h
                WHERE h.queue_id = g.queue_id AND h.grp = g.grp AND NOT h.waiting AND h.id NOT IN (SELECT id FROM gone)
                LIMIT 1
            ) head ON true
            WHERE head.found IS NULL
        ) p
        WHERE n.ctid = p.ctid AND n.waiting
        RETURNING n.id
    )
    SELECT count(*) INTO v_n FROM gone;
    RETURN v_n;
END $$;

CREATE OR REPLACE FUNCTION ferry.message_ack(p_queue bigint, p_ids bigint[], p_tokens bigint[], p_grouped boolean)
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
            UPDATE ferry.messages n SET waiting = false, visible_at = greatest(n.visible_at, now())
            FROM (
                SELECT nx.ctid
                FROM (SELECT DISTINCT queue_id, grp FROM gone WHERE grp IS NOT NULL) g
                CROSS JOIN LATERAL (
                    SELECT w.ctid FROM ferry.messages w
                    WHERE w.queue_id = g.queue_id AND w.grp = g.grp AND w.waiting AND w.id NOT IN (SELECT id FROM gone)
                    ORDER BY w.id LIMIT 1
                ) nx
                LEFT JOIN LATERAL (
                    SELECT true AS found FROM ferry.messages h
                    WHERE h.queue_id = g.queue_id AND h.grp = g.grp AND NOT h.waiting AND h.id NOT IN (SELECT id FROM gone)
                    LIMIT 1
                ) head ON true
                WHERE head.found IS NULL
            ) p
            WHERE n.ctid = p.ctid AND n.waiting
            RETURNING n.id
        )
        SELECT gn.id, gn.claim_token FROM gone gn
        UNION ALL SELECT -1, count(*) FROM promoted HAVING count(*) > 0;
END $$;

CREATE OR REPLACE FUNCTION ferry.message_nack(p_queue bigint, p_ids bigint[], p_tokens bigint[], p_dead_letter boolean,
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
            UPDATE ferry.messages n SET waiting = false, visible_at = greatest(n.visible_at, now())
            FROM (
                SELECT nx.ctid
                FROM (SELECT DISTINCT queue_id, grp FROM gone WHERE grp IS NOT NULL) g
                CROSS JOIN LATERAL (
                    SELECT w.ctid FROM ferry.messages w
                    WHERE w.queue_id = g.queue_id AND w.grp = g.grp AND w.waiting AND w.id NOT IN (SELECT id FROM gone)
                    ORDER BY w.id LIMIT 1
                ) nx
                LEFT JOIN LATERAL (
                    SELECT true AS found FROM ferry.messages h
                    WHERE h.queue_id = g.queue_id AND h.grp = g.grp AND NOT h.waiting AND h.id NOT IN (SELECT id FROM gone)
                    LIMIT 1
                ) head ON true
                WHERE head.found IS NULL
            ) p
            WHERE n.ctid = p.ctid AND n.waiting
            RETURNING n.id
        )
        SELECT rl.id, rl.claim_token, false FROM released rl
        UNION ALL SELECT gn.id, gn.receipt_token, true FROM gone gn;
END $$;

DROP FUNCTION IF EXISTS ferry.message_promote(bigint[], text[], bigint[]);
