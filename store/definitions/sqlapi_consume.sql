-- The SQL API's consumers: ferry.receive, ferry.ack, ferry.nack and
-- ferry.extend, and their helpers.

-- Raises the REST answer to invalid fields: one field's message, or, like
-- handlers' checks, "n invalid fields; first: ...".
CREATE OR REPLACE FUNCTION ferry.consumer_invalid(p_errors text[]) RETURNS void
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
CREATE OR REPLACE FUNCTION ferry.consumer_target(p_target text, p_resolve boolean) RETURNS ferry.queues
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
CREATE OR REPLACE FUNCTION ferry.consumer_receipts(p_receipts text[], OUT ids bigint[], OUT tokens bigint[])
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
CREATE OR REPLACE FUNCTION ferry.consumer_results(p_receipts text[], p_ids bigint[], p_tokens bigint[],
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

-- The pause between the attempts of the SQL API's retry loops
-- (ferry.message_claim_retried and its kin below), called from the
-- EXCEPTION handler of attempt p_attempt with the failure's SQLERRM: the
-- one text of their budget and wait. Consumers racing for a queue's head
-- meet serialization_failure together, so each attempt after the first
-- waits a random while growing with the attempt (up to p_attempt ms, at
-- most 20), so that they fall out of step; the 10th attempt spent, it
-- raises serialization_failure again with p_message (ferry.raise_retry),
-- which ends the caller's statement as the failure itself would have.
CREATE OR REPLACE FUNCTION ferry.retry_pause(p_attempt integer, p_message text) RETURNS void
    LANGUAGE plpgsql AS $$
BEGIN
    IF p_attempt >= 10 THEN
        PERFORM ferry.raise_retry(p_message);
    END IF;
    PERFORM pg_sleep(least(random() * p_attempt, 20) / 1000);
END $$;
REVOKE ALL ON FUNCTION ferry.retry_pause(integer, text) FROM PUBLIC;

-- ferry.message_claim run again (ferry.retry_pause: up to 10 attempts) when it fails with
-- serialization_failure: a candidate it saw was moved to another
-- partition of ferry.messages by a claim that committed meanwhile
-- (ferry.message_claim; store/doc.go, # Held snapshots). The store runs
-- its claim again itself (store.messageClaimRetried); an application's
-- transaction calling ferry.receive cannot, so this does, each attempt in
-- a subtransaction (the BEGIN ... EXCEPTION block) that rolls back only
-- that attempt, and so under a fresh snapshot (ferry.receive runs in READ
-- COMMITTED only), after ferry.retry_pause's wait. It
-- returns the claim's columns as arrays, one element per row, not rows:
-- rows returned inside the block would stay in the result after its
-- rollback, so a failed attempt's rows would be received too. Each
-- attempt is a subtransaction with an xid: more than 64 in one transaction
-- (16 ferry.receive calls that each retried 4 times) overflow the backend's
-- subxid cache, and every snapshot then looks in pg_subtrans (docs/outbox.md).
-- ferry.ack, ferry.nack and ferry.extend retry their statement alike (an
-- extend that committed meanwhile moves the row too).
CREATE OR REPLACE FUNCTION ferry.message_claim_retried(p_queue bigint, p_limit integer, p_max_receives integer, p_timeout_ms bigint,
        OUT o_exhausted boolean[], OUT o_id bigint[], OUT o_body text[], OUT o_attributes text[], OUT o_grp text[],
        OUT o_dedup_id text[], OUT o_event_id text[], OUT o_claim_token bigint[], OUT o_receive_count integer[],
        OUT o_sent_at timestamptz[])
    LANGUAGE plpgsql AS $$
DECLARE
    v_attempt integer := 0;
BEGIN
    LOOP
        v_attempt := v_attempt + 1;
        BEGIN
            SELECT array_agg(c.o_exhausted), array_agg(c.o_id), array_agg(c.o_body), array_agg(c.o_attributes),
                array_agg(c.o_grp), array_agg(c.o_dedup_id), array_agg(c.o_event_id), array_agg(c.o_claim_token),
                array_agg(c.o_receive_count), array_agg(c.o_sent_at)
            INTO o_exhausted, o_id, o_body, o_attributes, o_grp, o_dedup_id, o_event_id, o_claim_token, o_receive_count, o_sent_at
            FROM ferry.message_claim(p_queue, p_limit, p_max_receives, p_timeout_ms) c;
            RETURN;
        EXCEPTION WHEN serialization_failure THEN
            PERFORM ferry.retry_pause(v_attempt, SQLERRM);
        END;
    END LOOP;
END $$;
REVOKE ALL ON FUNCTION ferry.message_claim_retried(bigint, integer, integer, bigint) FROM PUBLIC;

-- ferry.message_dead_letter run again as ferry.message_claim_retried runs
-- the claim: it may meet rows moved under it too (the heads it promotes).
CREATE OR REPLACE FUNCTION ferry.message_dead_letter_retried(p_queue bigint, p_ids bigint[], p_max_receives integer) RETURNS bigint
    LANGUAGE plpgsql AS $$
DECLARE
    v_attempt integer := 0;
BEGIN
    LOOP
        v_attempt := v_attempt + 1;
        BEGIN
            RETURN ferry.message_dead_letter(p_queue, p_ids, p_max_receives);
        EXCEPTION WHEN serialization_failure THEN
            PERFORM ferry.retry_pause(v_attempt, SQLERRM);
        END;
    END LOOP;
END $$;
REVOKE ALL ON FUNCTION ferry.message_dead_letter_retried(bigint, bigint[], integer) FROM PUBLIC;

-- ferry.receive (API.md § SQL API): claims up to max_messages of the
-- queue or subscription in the caller's transaction, as POST .../receive
-- does without wait_seconds (it never waits), dead-lettering what has had
-- its max_receives in up to three passes (store.MessageClaim), each claim
-- and dead-lettering retried where rows moved under it
-- (ferry.message_claim_retried). The leases
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
    v_c record;
    v_r record;
BEGIN
    PERFORM ferry.consumer_target(target, false);
    IF v_n NOT BETWEEN 1 AND 100 THEN
        v_errors := v_errors || 'max_messages: must be between 1 and 100'::text;
    END IF;
    IF visibility_timeout_seconds NOT BETWEEN 0 AND 43200 THEN
        v_errors := v_errors || 'visibility_timeout_seconds: must be between 0 and 43200'::text;
    END IF;
    PERFORM ferry.consumer_invalid(v_errors);
    v_q := ferry.consumer_target(target, true);
    PERFORM ferry.read_committed_only('ferry.receive', 'the locks of its messages and their groups');
    -- 0, as in REST: received, visible again once the caller commits.
    v_timeout_ms := 1000::bigint * coalesce(visibility_timeout_seconds, v_q.visibility_timeout_seconds);
    PERFORM ferry.counts_per_transaction();
    FOR pass IN 1..3 LOOP
        EXIT WHEN v_got >= v_n;
        v_over := '{}';
        v_c := ferry.message_claim_retried(v_q.id, v_n - v_got, v_q.max_receives, v_timeout_ms);
        FOR v_r IN
            SELECT * FROM unnest(v_c.o_exhausted, v_c.o_id, v_c.o_body, v_c.o_attributes, v_c.o_grp, v_c.o_dedup_id,
                v_c.o_event_id, v_c.o_claim_token, v_c.o_receive_count, v_c.o_sent_at)
                AS c(o_exhausted, o_id, o_body, o_attributes, o_grp, o_dedup_id, o_event_id, o_claim_token, o_receive_count, o_sent_at)
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
            body := CASE WHEN v_q.topic_id IS NULL THEN v_r.o_body::jsonb
                ELSE ferry.event_cloud_defaults(v_r.o_body::jsonb, left(target, strpos(target, '/') - 1)) END;
            "group" := v_r.o_grp;
            dedup_id := v_r.o_dedup_id;
            receipt := ferry.receipt_encode(v_r.o_id, v_r.o_claim_token);
            receive_count := v_r.o_receive_count;
            sent_at := v_r.o_sent_at;
            RETURN NEXT;
        END LOOP;
        EXIT WHEN cardinality(v_over) = 0;
        PERFORM ferry.message_dead_letter_retried(v_q.id, v_over, v_q.max_receives);
    END LOOP;
END $$;
REVOKE ALL ON FUNCTION ferry.receive(text, integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.receive(text, integer, integer) TO ferry_consumer;

-- ferry.ack: POST .../ack in the caller's transaction. Its group locks
-- (messages of a group only) are held until the caller commits: a send to
-- the group of an acked message waits for that commit.
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
    v_attempt integer := 0;
    v_promoted boolean;
BEGIN
    PERFORM ferry.consumer_target(target, false);
    SELECT d.ids, d.tokens INTO v_ids, v_tokens FROM ferry.consumer_receipts(receipts) d;
    v_q := ferry.consumer_target(target, true);
    PERFORM ferry.read_committed_only('ferry.ack', 'the locks of its messages and their groups');
    PERFORM ferry.counts_per_transaction();
    LOOP
        v_attempt := v_attempt + 1;
        BEGIN
            SELECT array_agg(a.o_id) FILTER (WHERE a.o_id <> -1), array_agg(a.o_token) FILTER (WHERE a.o_id <> -1),
                coalesce(bool_or(a.o_id = -1), false)
            INTO v_applied_ids, v_applied_tokens, v_promoted
            FROM ferry.message_ack(v_q.id, v_ids, v_tokens, true) a;
            EXIT;
        EXCEPTION WHEN serialization_failure THEN
            PERFORM ferry.retry_pause(v_attempt, SQLERRM);
        END;
    END LOOP;
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
CREATE OR REPLACE FUNCTION ferry.consumer_nack_options(p_options jsonb, OUT delay_ms bigint, OUT error text, OUT dead_letter boolean)
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
    v_attempt integer := 0;
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
    PERFORM ferry.read_committed_only('ferry.nack', 'the locks of its messages and their groups');
    PERFORM ferry.counts_per_transaction();
    LOOP
        v_attempt := v_attempt + 1;
        BEGIN
            SELECT array_agg(n.o_id), array_agg(n.o_token), count(*) FILTER (WHERE n.o_dead)
            INTO v_applied_ids, v_applied_tokens, v_dead
            FROM ferry.message_nack(v_q.id, v_ids, v_tokens, v_o.dead_letter, v_q.max_receives, v_o.error, v_o.delay_ms,
                v_q.retry_min_seconds, v_q.retry_max_seconds) n;
            EXIT;
        EXCEPTION WHEN serialization_failure THEN
            PERFORM ferry.retry_pause(v_attempt, SQLERRM);
        END;
    END LOOP;
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
    v_attempt integer := 0;
BEGIN
    PERFORM ferry.consumer_target(target, false);
    SELECT d.ids, d.tokens INTO v_ids, v_tokens FROM ferry.consumer_receipts(receipts) d;
    IF visibility_timeout_seconds IS NULL THEN
        PERFORM ferry.raise(400, 'invalid_request', 'visibility_timeout_seconds: is required');
    ELSIF visibility_timeout_seconds NOT BETWEEN 1 AND 43200 THEN
        PERFORM ferry.raise(400, 'invalid_request', 'visibility_timeout_seconds: must be between 1 and 43200');
    END IF;
    v_q := ferry.consumer_target(target, true);
    PERFORM ferry.read_committed_only('ferry.extend', 'the locks of its messages and their groups');
    LOOP
        v_attempt := v_attempt + 1;
        BEGIN
            SELECT array_agg(x.o_id), array_agg(x.o_token) INTO v_applied_ids, v_applied_tokens
            FROM ferry.message_extend(v_q.id, v_ids, v_tokens, 1000::bigint * visibility_timeout_seconds) x;
            EXIT;
        EXCEPTION WHEN serialization_failure THEN
            PERFORM ferry.retry_pause(v_attempt, SQLERRM);
        END;
    END LOOP;
    RETURN QUERY SELECT * FROM ferry.consumer_results(receipts, v_ids, v_tokens, v_applied_ids, v_applied_tokens);
END $$;
REVOKE ALL ON FUNCTION ferry.extend(text, text[], integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ferry.extend(text, text[], integer) TO ferry_consumer;
