-- Advisory locks of queues and groups, and the isolation a call that
-- waits for one needs.

-- Advisory lock keys. A send holds its queue's key in shared mode (purge and
-- delete take it exclusively) and each of its groups' keys exclusively, so
-- that sends and promotions of one group are serialised. The ids are cast
-- to text, not concatenated as they are (text || bigint is STABLE): the
-- same keys, with bodies as IMMUTABLE as declared, so that PostgreSQL
-- inlines them where they are called instead of running a statement of
-- their own per row (50,000 in a purge of 50,000 grouped messages).
CREATE OR REPLACE FUNCTION ferry.queue_lock_key(queue_id bigint) RETURNS bigint LANGUAGE sql IMMUTABLE AS
$$ SELECT hashtextextended('ferry.queue/' || queue_id::text, 0) $$;

CREATE OR REPLACE FUNCTION ferry.group_lock_key(queue_id bigint, grp text) RETURNS bigint LANGUAGE sql IMMUTABLE AS
$$ SELECT hashtextextended('ferry.group/' || queue_id::text || '/' || grp, 0) $$;

-- The group locks of the given live messages of a queue, in key order:
-- taken before any statement that removes a group head, so that group
-- locks are always taken before row locks. p_tokens are the receipts'
-- claim tokens, whose partitions make each probe one (ferry.claim_token),
-- or NULL.
-- (PL/pgSQL, not SQL: a SQL function's statement would be planned again
-- at every call.)
CREATE OR REPLACE FUNCTION ferry.message_group_lock(p_queue bigint, p_ids bigint[], p_tokens bigint[]) RETURNS bigint
    LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_n bigint;
BEGIN
    SELECT /* ferry:message_group_lock */ count(pg_advisory_xact_lock(k)) INTO v_n FROM (
        SELECT DISTINCT ferry.group_lock_key(p_queue, m.grp) AS k
        FROM unnest(p_ids, p_tokens) AS r(id, token)
        CROSS JOIN LATERAL (
            (SELECT x.grp FROM ferry.messages x WHERE x.queue_id = p_queue AND x.id = r.id AND x.part = ferry.token_part(r.token) LIMIT 1)
            UNION ALL
            (SELECT x.grp FROM ferry.messages x WHERE x.queue_id = p_queue AND x.id = r.id LIMIT 1)
            LIMIT 1
        ) m
        WHERE m.grp IS NOT NULL
        ORDER BY k
    ) locks;
    RETURN v_n;
END $$;
REVOKE ALL ON FUNCTION ferry.message_group_lock(bigint, bigint[], bigint[]) FROM PUBLIC;

-- The same for messages known by id alone (a dead-lettering of exhausted
-- messages), and for callers of an earlier generation.
CREATE OR REPLACE FUNCTION ferry.message_group_lock(p_queue bigint, p_ids bigint[]) RETURNS bigint
    LANGUAGE sql AS $$ SELECT ferry.message_group_lock(p_queue, p_ids, NULL::bigint[]) $$;
REVOKE ALL ON FUNCTION ferry.message_group_lock(bigint, bigint[]) FROM PUBLIC;

-- Refuses (FR400) a call in a transaction that is not READ COMMITTED:
-- what (the call) must see what committed while it waited for lock, and
-- a REPEATABLE READ or SERIALIZABLE snapshot was taken before that wait
-- (an ack in one would promote the next message of a group from a
-- snapshot that does not see it, and leave the group without a head).
-- The one text of the rule.
CREATE OR REPLACE FUNCTION ferry.read_committed_only(what text, lock text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM ferry.raise(400, 'invalid_request', format('%s must run in a READ COMMITTED transaction, not %s: '
            'it must see what committed while it waited for %s; run SET TRANSACTION ISOLATION LEVEL READ COMMITTED '
            'as the transaction''s first statement (or BEGIN ISOLATION LEVEL READ COMMITTED)',
            what, upper(current_setting('transaction_isolation')), lock));
    END IF;
END $$;
REVOKE ALL ON FUNCTION ferry.read_committed_only(text, text) FROM PUBLIC;
