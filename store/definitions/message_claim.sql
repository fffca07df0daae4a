-- ==== consumers =============================================================

-- The claim engine: the statements that claim, dead-letter, ack, nack and
-- extend, one text each. The REST API (store.MessageClaim and its kin) and push
-- delivery call these functions, and so do ferry.receive, ferry.ack,
-- ferry.nack and ferry.extend (sqlapi_consume.sql): both faces run the same statements.
-- Their shapes keep them O(batch) whatever plan PostgreSQL chooses
-- (DESIGN.md invariant 11; the store's doc, # Plans, explains them; the plan
-- tests store/plans_queue_test.go call them through the Go store), and a
-- PL/pgSQL statement may get a generic plan after five calls. The time
-- a statement compares leases with is the clock at the call, not now():
-- in an application's transaction now() is when the transaction began.
-- Not granted to anyone: only Ferry (the owner) and the definer functions
-- call them.

-- One claim pass (store.messageClaimOnce): leases up to p_limit visible
-- messages of the queue, and returns as exhausted (o_exhausted, o_id only)
-- the candidates whose receive_count reached p_max_receives. With
-- p_owner, the claim is fenced by that owner's push lease
-- (store.PushLeaseClaim), and a lost lease is one row of NULLs.
-- The plain and the fenced claim find their candidates by two statements
-- that repeat the candidate scan on purpose: one statement for both would
-- read the lease for every plain claim, or leave it to a generic plan to
-- prune the fenced part by a parameter, and PL/pgSQL shares no text
-- between statements except through EXECUTE, which plans every call
-- anew. Each keeps its own plan and its own tag. Both lock their
-- candidates (FOR UPDATE SKIP LOCKED) and collect their (part, ctid); one
-- UPDATE, with index scans off, then leases them (ferry.message_hold
-- says why in two statements). ferry.messages is partitioned
-- (store/doc.go, # Held snapshots): the candidates are read from every
-- partition, each in its own claim index, merged in (visible_at, id)
-- order; the UPDATE moves each claimed row to the slot of its lease's
-- expiry (ferry.message_part). A candidate another claim moved after the
-- candidate scan's snapshot raises serialization_failure (40001: "tuple
-- to be locked was already moved to another partition"), where a table of
-- one partition would have skipped it: the store runs the claim again, a
-- SQL API caller's transaction ends.
-- The lease is read from the clock once per row (the LATERAL; OFFSET 0
-- keeps it a subquery), so that ferry.message_part is inlined, not called
-- per row, and the claim token (ferry.claim_token) names the same slot.
--
-- p_floor: the claim reads only messages due at or after it. The store
-- passes a floor at or below every claimable message's due time that it
-- knows of (store.ClaimFloors: the send time of the oldest message an
-- earlier claim took), so that the claim index is entered at the queue's
-- head and not walked from its start across the entries of messages
-- consumed since a held snapshot began (store/doc.go, # Held snapshots);
-- -infinity reads them all.
CREATE OR REPLACE FUNCTION ferry.message_claim_from(p_queue bigint, p_limit integer, p_max_receives integer, p_timeout_ms bigint,
        p_owner uuid, p_floor timestamptz)
    RETURNS TABLE(o_exhausted boolean, o_id bigint, o_body text, o_attributes text, o_grp text, o_dedup_id text,
        o_event_id text, o_claim_token bigint, o_receive_count integer, o_sent_at timestamptz)
    LANGUAGE plpgsql
    -- Partitions the planner believes empty would be read whole per probe,
    -- or sorted whole instead of merged (store/doc.go, # Held snapshots).
    SET jit = off SET enable_seqscan = off SET enable_sort = off SET enable_incremental_sort = off
    SET enable_bitmapscan = off SET enable_indexscan = on AS $$
DECLARE
    v_at timestamptz := clock_timestamp();
    v_floor timestamptz := coalesce(p_floor, '-infinity');
    v_parts smallint[];
    v_ctids tid[];
    v_exhausted bigint[];
    v_lost boolean := false;
BEGIN
    IF p_owner IS NULL THEN
        SELECT /* ferry:message_claim_candidates */ array_agg(c.part) FILTER (WHERE NOT c.exhausted),
            array_agg(c.ctid) FILTER (WHERE NOT c.exhausted), array_agg(c.id) FILTER (WHERE c.exhausted)
        INTO v_parts, v_ctids, v_exhausted
        FROM (
            SELECT m.part, m.ctid, m.id, m.receive_count >= p_max_receives AS exhausted
            FROM ferry.messages m
            WHERE m.queue_id = p_queue AND NOT m.waiting AND m.visible_at >= v_floor AND m.visible_at <= v_at
            ORDER BY m.visible_at, m.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ) c;
    ELSE
        -- Fenced: the lease is share-locked only when a message is
        -- claimable (head: one probe of the claim index), before any
        -- message is locked; with nothing to claim it is only read
        -- (live), so an idle worker's poll writes nothing. Lost: the
        -- lease is neither locked nor live.
        WITH /* ferry:message_claim_fenced_candidates */ head AS MATERIALIZED (
                SELECT 1 FROM ferry.messages h
                WHERE h.queue_id = p_queue AND NOT h.waiting AND h.visible_at >= v_floor AND h.visible_at <= v_at
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
            )
        SELECT array_agg(c.part) FILTER (WHERE NOT c.exhausted), array_agg(c.ctid) FILTER (WHERE NOT c.exhausted),
            array_agg(c.id) FILTER (WHERE c.exhausted), NOT EXISTS (SELECT 1 FROM lease) AND NOT EXISTS (SELECT 1 FROM live)
        INTO v_parts, v_ctids, v_exhausted, v_lost
        FROM (
            SELECT m.part, m.ctid, m.id, m.receive_count >= p_max_receives AS exhausted
            FROM ferry.messages m
            WHERE m.queue_id = p_queue AND NOT m.waiting AND m.visible_at >= v_floor AND m.visible_at <= v_at
                AND EXISTS (SELECT 1 FROM lease)
            ORDER BY m.visible_at, m.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ) c;
        IF v_lost THEN
            RETURN QUERY SELECT NULL::boolean, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
                NULL::bigint, NULL::integer, NULL::timestamptz;
            RETURN;
        END IF;
    END IF;
    IF v_parts IS NOT NULL THEN
        PERFORM set_config('enable_indexscan', 'off', true);
        RETURN QUERY UPDATE /* ferry:message_claim */ ferry.messages m SET
                visible_at = l.lease,
                part = ferry.message_part(l.lease, v_at),
                receive_count = m.receive_count + 1,
                claim_token = ferry.claim_token(ferry.message_part(l.lease, v_at), m.grp IS NOT NULL)
            FROM unnest(v_parts, v_ctids) AS c(part, row_ctid) CROSS JOIN LATERAL (
                SELECT clock_timestamp() + p_timeout_ms * interval '1 millisecond' AS lease OFFSET 0
            ) l
            WHERE m.part = c.part AND m.ctid = c.row_ctid
            RETURNING false, m.id, m.body::text, m.attributes::text, m.grp, m.dedup_id, m.event_id, m.claim_token,
                m.receive_count, m.sent_at;
    END IF;
    IF v_exhausted IS NOT NULL THEN
        RETURN QUERY SELECT true, e.id, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::integer,
            NULL::timestamptz FROM unnest(v_exhausted) AS e(id);
    END IF;
END $$;
REVOKE ALL ON FUNCTION ferry.message_claim_from(bigint, integer, integer, bigint, uuid, timestamptz) FROM PUBLIC;

-- The claim without a floor: what ferry.receive and older binaries call.
CREATE OR REPLACE FUNCTION ferry.message_claim(p_queue bigint, p_limit integer, p_max_receives integer, p_timeout_ms bigint,
        p_owner uuid DEFAULT NULL)
    RETURNS TABLE(o_exhausted boolean, o_id bigint, o_body text, o_attributes text, o_grp text, o_dedup_id text,
        o_event_id text, o_claim_token bigint, o_receive_count integer, o_sent_at timestamptz)
    LANGUAGE sql AS $$
    SELECT * FROM ferry.message_claim_from(p_queue, p_limit, p_max_receives, p_timeout_ms, p_owner, '-infinity')
$$;
REVOKE ALL ON FUNCTION ferry.message_claim(bigint, integer, integer, bigint, uuid) FROM PUBLIC;
