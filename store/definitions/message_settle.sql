-- The statements that settle claimed messages: promote a group's next
-- message, dead-letter, ack, nack and extend. See message_claim.sql for
-- what they share.

-- The promotion of a group's next message, written once: the engine's
-- dead letter, ack and nack below and the store's deletes
-- (store.messageDeleteSet: purge, retention, seek) all call it.
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
-- the UPDATE finds them by (part, ctid) (a ctid is unique within one
-- partition of ferry.messages only). Not granted to anyone.
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
-- at every call.) Its callers' statements run with index scans off (see
-- ferry.message_hold): it turns them on for its own.
CREATE OR REPLACE FUNCTION ferry.message_promote(p_queues bigint[], p_groups text[], p_ids bigint[]) RETURNS bigint
    LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    SET enable_incremental_sort = off SET enable_indexscan = on AS $$
DECLARE
    v_n bigint;
BEGIN
    WITH /* ferry:message_promote */ promoted AS (
        UPDATE ferry.messages n SET waiting = false, visible_at = greatest(n.visible_at, now()),
            part = ferry.message_part(greatest(n.visible_at, now()), now())
        FROM (
            SELECT nx.part, nx.ctid
            FROM (
                SELECT DISTINCT l.queue_id, l.grp FROM unnest(p_queues, p_groups) AS l(queue_id, grp)
                WHERE l.grp IS NOT NULL
            ) g
            -- Both probes order by (grp, id), an order only the group
            -- index serves: "grp = g ORDER BY id" is served by the
            -- primary key (queue_id, id, part) as well, and in a
            -- partition the planner believes empty the two tie and the
            -- primary key may win, walking the queue. "grp >= g AND grp
            -- <= g" is "grp = g" to the index, and leaves the order grp
            -- first. (A row comparison would not do: a btree scan ends
            -- only on its first column.)
            CROSS JOIN LATERAL (
                SELECT w.part, w.ctid FROM ferry.messages w
                WHERE w.queue_id = g.queue_id AND w.grp >= g.grp AND w.grp <= g.grp AND w.waiting
                    AND w.id NOT IN (SELECT unnest(p_ids))
                ORDER BY w.grp, w.id LIMIT 1
            ) nx
            -- Backward, so the scan starts at the group's last row that
            -- is not waiting (the key "<= g" lets the btree position on
            -- waiting too) and ends as it leaves the group: forward, it
            -- would start at the group's first row and read every
            -- waiting row after the heads.
            LEFT JOIN LATERAL (
                SELECT true AS found FROM ferry.messages h
                WHERE h.queue_id = g.queue_id AND h.grp >= g.grp AND h.grp <= g.grp AND NOT h.waiting
                    AND h.id NOT IN (SELECT unnest(p_ids))
                ORDER BY h.grp DESC, h.id DESC
                LIMIT 1
            ) head ON true
            WHERE head.found IS NULL
        ) p
        WHERE n.part = p.part AND n.ctid = p.ctid AND n.waiting
        RETURNING n.id
    )
    SELECT count(*) INTO v_n FROM promoted;
    RETURN v_n;
END $$;
REVOKE ALL ON FUNCTION ferry.message_promote(bigint[], text[], bigint[]) FROM PUBLIC;

-- Dead letters into another queue (API.md § Work queues; store/doc.go,
-- # Dead letters): before a statement dead-letters messages of p_queue
-- (p_ids), this finds the queue's dead_letter_queue and readies it:
-- the target's lock, shared (as a send takes it: a purge or a delete of
-- the target waits, and is not under way), then the target's group locks
-- of the messages' groups in key order, so that the moved messages join
-- their groups there behind a head that cannot change. The caller holds
-- the messages' own group locks already (source before target: queues
-- never make a cycle, so two dead-letterings never wait crosswise).
-- o_target is NULL when the queue has none, or when it changed while the
-- lock was awaited (a delete of the target committed meanwhile cleared
-- it): the dead letters then stay with the queue. o_source names the
-- queue (topic/subscription for a subscription) for the moved messages'
-- ferry:dead_letter_source attribute.
CREATE OR REPLACE FUNCTION ferry.message_dead_letter_queue(p_queue bigint, p_ids bigint[], OUT o_target bigint, OUT o_source text)
    LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_first bigint;
BEGIN
    SELECT q.dead_letter_queue_id INTO v_first FROM ferry.queues q WHERE q.id = p_queue;
    IF v_first IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(ferry.queue_lock_key(v_first));
    SELECT q.dead_letter_queue_id, CASE WHEN q.topic_id IS NULL THEN q.name ELSE t.name || '/' || q.name END
    INTO o_target, o_source
    FROM ferry.queues q LEFT JOIN ferry.topics t ON t.id = q.topic_id WHERE q.id = p_queue;
    IF o_target IS DISTINCT FROM v_first THEN
        o_target := NULL;
        RETURN;
    END IF;
    PERFORM /* ferry:message_dead_letter_queue_lock */ count(pg_advisory_xact_lock(l.k)) FROM (
        SELECT DISTINCT ferry.group_lock_key(o_target, m.grp) AS k
        FROM unnest(p_ids) AS r(id)
        CROSS JOIN LATERAL (
            SELECT x.grp FROM ferry.messages x WHERE x.queue_id = p_queue AND x.id = r.id LIMIT 1
        ) m
        WHERE m.grp IS NOT NULL
        ORDER BY k
    ) l;
END $$;
REVOKE ALL ON FUNCTION ferry.message_dead_letter_queue(bigint, bigint[]) FROM PUBLIC;

-- Stores the rows a statement just dead-lettered (p_rows, deleted from
-- their queue): with no target (p_target NULL), as dead letters of their
-- queue, as ever; with one (ferry.message_dead_letter_queue readied it),
-- as new available messages of the target: the same id, body,
-- attributes, group and dedup_id, receive_count 0, sent_at kept (the
-- target's retention counts from the original send, as SQS does), visible
-- now, behind the live messages of their group there (waiting), and
-- with three reserved attributes the receiver reads:
-- ferry:dead_letter_source (p_source), ferry:dead_letter_reason
-- (p_reason: max_receives or nack) and ferry:last_error (when there is
-- one). Neither the target's dedup window (the message was deduplicated
-- when it was sent; it is moved, not sent) nor its max_depth applies (a
-- dead-lettering never fails the consumer's ack or nack; SQS ignores a
-- dead-letter queue's limits too). A row whose id the target holds
-- already stays a dead letter of its queue: nothing is lost. p_error, when
-- set, is the last_error (a nack's). Wakes the target at commit when
-- anything moved. Returns how many rows it stored. Called as the
-- statement's CTE over its "gone" rows (as ferry.message_promote is), so
-- it sees them deleted, and with index scans on (its callers' statement
-- runs with them off, as ferry.message_promote's do).
CREATE OR REPLACE FUNCTION ferry.message_dead_letter_put(p_target bigint, p_source text, p_reason text, p_error text,
        p_rows ferry.messages[]) RETURNS bigint
    LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off SET enable_indexscan = on AS $$
DECLARE
    v_moved bigint[] := '{}';
    v_n bigint;
BEGIN
    IF p_target IS NOT NULL THEN
        WITH /* ferry:message_dead_letter_move */ r AS (
            SELECT * FROM unnest(p_rows)
        ),
        moved AS (
            INSERT INTO ferry.messages AS m (queue_id, id, part, visible_at, waiting, sent_at, grp, dedup_id, last_error, attributes, body)
            SELECT p_target, r.id, ferry.message_part(now(), now()), now(),
                r.grp IS NOT NULL AND (row_number() OVER (PARTITION BY r.grp ORDER BY r.id) > 1 OR busy.found IS NOT NULL),
                r.sent_at, r.grp, r.dedup_id, coalesce(p_error, r.last_error),
                (coalesce(r.attributes::jsonb, '{}')
                    || jsonb_build_object('ferry:dead_letter_source', p_source, 'ferry:dead_letter_reason', p_reason)
                    || CASE WHEN coalesce(p_error, r.last_error) IS NULL THEN '{}'::jsonb
                        ELSE jsonb_build_object('ferry:last_error', coalesce(p_error, r.last_error)) END)::json,
                r.body
            FROM r
            LEFT JOIN LATERAL (
                SELECT true AS found FROM ferry.messages x WHERE x.queue_id = p_target AND x.grp = r.grp LIMIT 1
            ) busy ON r.grp IS NOT NULL
            -- An id the target holds, in any partition (the primary key
            -- holds part, so ON CONFLICT sees only its own partition's).
            LEFT JOIN LATERAL (
                SELECT true AS found FROM ferry.messages x WHERE x.queue_id = p_target AND x.id = r.id LIMIT 1
            ) held ON true
            WHERE held.found IS NULL
            ORDER BY r.id
            ON CONFLICT DO NOTHING
            RETURNING m.id
        )
        SELECT coalesce(array_agg(id), '{}') INTO v_moved FROM moved;
        IF cardinality(v_moved) > 0 THEN
            PERFORM ferry.wake_at_commit(p_target);
        END IF;
    END IF;
    WITH /* ferry:message_dead_letter_keep */ r AS (
        SELECT * FROM unnest(p_rows)
    ),
    kept AS (
        INSERT INTO ferry.dead_letters (queue_id, id, sent_at, receive_count, grp, dedup_id, event_id, event_partition, event_offset,
            last_error, attributes, body)
        SELECT r.queue_id, r.id, r.sent_at, r.receive_count, r.grp, r.dedup_id, r.event_id, r.event_partition, r.event_offset,
            coalesce(p_error, r.last_error), r.attributes, r.body
        FROM r
        WHERE NOT r.id = ANY (v_moved)
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM kept;
    RETURN cardinality(v_moved) + v_n;
END $$;
REVOKE ALL ON FUNCTION ferry.message_dead_letter_put(bigint, text, text, text, ferry.messages[]) FROM PUBLIC;

-- Every statement that changes claimed or claimable rows of ferry.messages
-- (the claim, ack, nack, extend, dead-lettering) is two statements: the
-- first finds its rows by index probes and locks them (FOR UPDATE, the
-- claim's SKIP LOCKED), collecting each row's (part, ctid); the second
-- changes exactly those rows, joined by (part, ctid) to the collected
-- arrays, with index scans off. Locked, the rows cannot change in
-- between, and the second statement's snapshot sees the version the lock
-- returned (a row an extend changed meanwhile is found at its new ctid,
-- TestSettleRacingExtend). With index scans, sequential scans and bitmap
-- scans all off, a TID scan of the one partition the row's part names is
-- the only way in that is not disabled, whatever the planner believes of
-- the partitions' sizes: joined by key, a generic plan made after an
-- ANALYZE found a ring slot empty scanned that partition whole for every
-- row (store/doc.go, # Plans). The functions turn index scans off with
-- set_config(..., true) just before the second statement, and list
-- enable_indexscan in their SET clause so that the caller's value is back
-- when they return; ferry.message_promote and
-- ferry.message_dead_letter_put, which run inside those statements, turn
-- them on for their own. The statement triggers of ferry.messages
-- (counters.sql) read only their transition tables.

-- Locks the rows of current receipts (p_ids, p_tokens): per receipt, one
-- primary-key probe of the partition its token names
-- (ferry.claim_token), then, when that misses, of all partitions (the
-- row moved: an extend, the rotator's forward), in id order so that two
-- settles of the same receipts never wait crosswise. FOR UPDATE returns a
-- row's newest version (READ COMMITTED: the probe waits for a concurrent
-- change and reads what it left); a receipt whose row now carries another
-- token (or none) is not returned, though its row stays locked until the
-- transaction ends (a claim skips it meanwhile). Returns each current
-- receipt's row: (part, ctid) for the second statement, and what the
-- callers check (the lease, the receive count). A row another claim moved
-- to another partition raises serialization_failure (40001), as the
-- claim's UPDATE does. Not granted to anyone.
CREATE OR REPLACE FUNCTION ferry.message_hold(p_queue bigint, p_ids bigint[], p_tokens bigint[])
    RETURNS TABLE(o_part smallint, o_ctid tid, o_id bigint, o_token bigint, o_visible_at timestamptz, o_receive_count integer)
    LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off SET enable_indexscan = on AS $$
BEGIN
    RETURN QUERY SELECT /* ferry:message_hold */ m.part, m.ctid, m.id, m.claim_token, m.visible_at, m.receive_count
    FROM (SELECT r.id, r.token FROM unnest(p_ids, p_tokens) AS r(id, token) ORDER BY r.id) r
    CROSS JOIN LATERAL (
        (SELECT * FROM (
            SELECT x.part, x.ctid, x.id, x.claim_token, x.visible_at, x.receive_count FROM ferry.messages x
            WHERE x.queue_id = p_queue AND x.id = r.id AND x.part = ferry.token_part(r.token) LIMIT 1
            FOR UPDATE) h)
        UNION ALL
        (SELECT * FROM (
            SELECT x.part, x.ctid, x.id, x.claim_token, x.visible_at, x.receive_count FROM ferry.messages x
            WHERE x.queue_id = p_queue AND x.id = r.id LIMIT 1
            FOR UPDATE) a)
        LIMIT 1
    ) m
    WHERE m.claim_token = r.token
    LIMIT cardinality(p_ids);
END $$;
REVOKE ALL ON FUNCTION ferry.message_hold(bigint, bigint[], bigint[]) FROM PUBLIC;

-- Moves the given messages to the dead letters if they are still
-- exhausted (available, received at least p_max_receives times: checked
-- again under the lock), promoting the next message of their groups;
-- returns how many it moved (store.messageDeadLetter). With a
-- dead_letter_queue, they move into that queue instead
-- (ferry.message_dead_letter_put).
CREATE OR REPLACE FUNCTION ferry.message_dead_letter(p_queue bigint, p_ids bigint[], p_max_receives integer) RETURNS bigint
    LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off SET enable_indexscan = on AS $$
DECLARE
    v_at timestamptz := clock_timestamp();
    v_n bigint;
    v_target bigint;
    v_source text;
    v_parts smallint[];
    v_ctids tid[];
BEGIN
    PERFORM ferry.message_group_lock(p_queue, p_ids);
    SELECT d.o_target, d.o_source INTO v_target, v_source FROM ferry.message_dead_letter_queue(p_queue, p_ids) d;
    SELECT /* ferry:message_dead_letter_hold */ array_agg(m.part), array_agg(m.ctid) INTO v_parts, v_ctids
    FROM (SELECT r.id FROM unnest(p_ids) AS r(id) ORDER BY r.id) r
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT x.part, x.ctid, x.waiting, x.visible_at, x.receive_count FROM ferry.messages x
            WHERE x.queue_id = p_queue AND x.id = r.id LIMIT 1
            FOR UPDATE) x
    ) m
    WHERE NOT m.waiting AND m.visible_at <= v_at AND m.receive_count >= p_max_receives;
    IF v_parts IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM set_config('enable_indexscan', 'off', true);
    WITH /* ferry:message_dead_letter */ gone AS (
        DELETE FROM ferry.messages m USING unnest(v_parts, v_ctids) AS t(part, row_ctid)
        WHERE m.part = t.part AND m.ctid = t.row_ctid
        RETURNING m.queue_id, m.id, m.grp, m AS r
    ),
    dead AS (
        SELECT CASE WHEN count(*) > 0 THEN ferry.message_dead_letter_put(v_target, v_source, 'max_receives', NULL, array_agg(r)) END AS n
        FROM gone
    ),
    promoted AS (
        SELECT CASE WHEN count(*) > 0 THEN ferry.message_promote(array_agg(queue_id), array_agg(grp), array_agg(id)) ELSE 0 END AS n
        FROM gone WHERE grp IS NOT NULL
    )
    SELECT count(*) INTO v_n FROM gone, dead, promoted;
    RETURN v_n;
END $$;
REVOKE ALL ON FUNCTION ferry.message_dead_letter(bigint, bigint[], integer) FROM PUBLIC;

-- Deletes the messages whose rows still carry the receipts' claim tokens
-- (p_ids, p_tokens) and promotes the next message of their groups
-- (store.MessageAck); returns (id, token) per applied receipt, and
-- (-1, n) when it promoted n > 0 messages. p_grouped false skips the
-- group locks (the caller knows the messages have no group), and so do
-- tokens that say their messages have none (ferry.claim_token: a token
-- that says so falsely matches no row, so nothing it names is removed).
-- The rows are found and locked by ferry.message_hold.
-- Unlike nack and extend, an ack needs no live lease: as SQS's
-- DeleteMessage, it applies after the visibility timeout ran out as long
-- as the message was not received again. That is the token alone: every
-- claim sets a fresh one and a nack clears it. An expired group head is
-- still its group's head (not waiting), so acking it promotes the next
-- message as any ack does. A claim that took the message again after this
-- statement's snapshot moved it to another partition: the lock then
-- raises serialization_failure (40001) and deletes nothing; the store
-- runs the ack again (now stale), a SQL API caller's transaction ends.
CREATE OR REPLACE FUNCTION ferry.message_ack(p_queue bigint, p_ids bigint[], p_tokens bigint[], p_grouped boolean)
    RETURNS TABLE(o_id bigint, o_token bigint)
    LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off SET enable_indexscan = on AS $$
DECLARE
    v_parts smallint[];
    v_ctids tid[];
BEGIN
    IF p_grouped AND ferry.tokens_grouped(p_tokens) THEN
        PERFORM ferry.message_group_lock(p_queue, p_ids, p_tokens);
    END IF;
    SELECT array_agg(h.o_part), array_agg(h.o_ctid) INTO v_parts, v_ctids FROM ferry.message_hold(p_queue, p_ids, p_tokens) h;
    IF v_parts IS NULL THEN
        RETURN;
    END IF;
    PERFORM set_config('enable_indexscan', 'off', true);
    RETURN QUERY WITH /* ferry:message_ack */ gone AS (
            DELETE FROM ferry.messages m USING unnest(v_parts, v_ctids) AS t(part, row_ctid)
            WHERE m.part = t.part AND m.ctid = t.row_ctid
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
-- head. Returns (id, token, dead) per applied receipt. The rows are found
-- and locked by ferry.message_hold, then checked for the lease.
CREATE OR REPLACE FUNCTION ferry.message_nack(p_queue bigint, p_ids bigint[], p_tokens bigint[], p_dead_letter boolean,
        p_max_receives integer, p_error text, p_delay_ms bigint, p_retry_min integer, p_retry_max integer)
    RETURNS TABLE(o_id bigint, o_token bigint, o_dead boolean)
    LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off SET enable_indexscan = on AS $$
DECLARE
    v_at timestamptz := clock_timestamp();
    v_target bigint;
    v_source text;
    v_parts smallint[];
    v_ctids tid[];
    v_tokens bigint[];
    v_dead boolean[];
    v_backoff interval[];
BEGIN
    IF ferry.tokens_grouped(p_tokens) THEN
        PERFORM ferry.message_group_lock(p_queue, p_ids, p_tokens);
    END IF;
    SELECT d.o_target, d.o_source INTO v_target, v_source FROM ferry.message_dead_letter_queue(p_queue, p_ids) d;
    SELECT array_agg(h.o_part), array_agg(h.o_ctid), array_agg(h.o_token),
        array_agg(p_dead_letter OR h.o_receive_count >= p_max_receives),
        array_agg(coalesce(p_delay_ms * interval '1 millisecond',
            -- exponential backoff with equal jitter: half fixed, half random
            make_interval(secs => least(p_retry_max::float8, p_retry_min::float8 * power(2, least(h.o_receive_count - 1, 30)))
                * (0.5 + random() / 2))))
    INTO v_parts, v_ctids, v_tokens, v_dead, v_backoff
    FROM ferry.message_hold(p_queue, p_ids, p_tokens) h
    WHERE h.o_visible_at > v_at;
    IF v_parts IS NULL THEN
        RETURN;
    END IF;
    PERFORM set_config('enable_indexscan', 'off', true);
    RETURN QUERY WITH /* ferry:message_nack */ released AS (
            UPDATE ferry.messages m SET
                claim_token = NULL,
                last_error = coalesce(p_error, m.last_error),
                visible_at = v_at + t.backoff,
                part = ferry.message_part(v_at + t.backoff, v_at)
            FROM unnest(v_parts, v_ctids, v_tokens, v_dead, v_backoff) AS t(part, row_ctid, token, dead, backoff)
            WHERE m.part = t.part AND m.ctid = t.row_ctid AND NOT t.dead
            RETURNING m.id, t.token
        ),
        gone AS (
            DELETE FROM ferry.messages m USING unnest(v_parts, v_ctids, v_tokens, v_dead) AS t(part, row_ctid, token, dead)
            WHERE m.part = t.part AND m.ctid = t.row_ctid AND t.dead
            RETURNING m.queue_id, m.id, m.grp, m AS r, t.token AS receipt_token
        ),
        dead AS (
            SELECT CASE WHEN count(*) > 0 THEN ferry.message_dead_letter_put(v_target, v_source,
                CASE WHEN p_dead_letter THEN 'nack' ELSE 'max_receives' END, p_error, array_agg(gone.r)) END AS n
            FROM gone
        ),
        promoted AS (
            SELECT CASE WHEN count(*) > 0 THEN ferry.message_promote(array_agg(queue_id), array_agg(grp), array_agg(id)) ELSE 0 END AS n
            FROM gone WHERE grp IS NOT NULL
        )
        SELECT rl.id, rl.token, false FROM released rl
        UNION ALL SELECT gn.id, gn.receipt_token, true FROM gone gn, dead, promoted;
END $$;
REVOKE ALL ON FUNCTION ferry.message_nack(bigint, bigint[], bigint[], boolean, integer, text, bigint, integer, integer) FROM PUBLIC;

-- Moves the lease of current receipts to now + p_timeout_ms
-- (store.MessageExtend); returns (id, token) per applied receipt. The
-- rows are found and locked by ferry.message_hold, then checked for the
-- lease.
CREATE OR REPLACE FUNCTION ferry.message_extend(p_queue bigint, p_ids bigint[], p_tokens bigint[], p_timeout_ms bigint)
    RETURNS TABLE(o_id bigint, o_token bigint)
    LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off SET enable_indexscan = on AS $$
DECLARE
    v_at timestamptz := clock_timestamp();
    v_parts smallint[];
    v_ctids tid[];
BEGIN
    SELECT array_agg(h.o_part), array_agg(h.o_ctid) INTO v_parts, v_ctids
    FROM ferry.message_hold(p_queue, p_ids, p_tokens) h
    WHERE h.o_visible_at > v_at;
    IF v_parts IS NULL THEN
        RETURN;
    END IF;
    PERFORM set_config('enable_indexscan', 'off', true);
    RETURN QUERY UPDATE /* ferry:message_extend */ ferry.messages m
        SET visible_at = clock_timestamp() + p_timeout_ms * interval '1 millisecond',
            part = ferry.message_part(clock_timestamp() + p_timeout_ms * interval '1 millisecond', v_at)
        FROM unnest(v_parts, v_ctids) AS t(part, row_ctid)
        WHERE m.part = t.part AND m.ctid = t.row_ctid
        RETURNING m.id, m.claim_token;
END $$;
REVOKE ALL ON FUNCTION ferry.message_extend(bigint, bigint[], bigint[], bigint) FROM PUBLIC;
