-- What REST answers with a 4xx, the SQL API raises as SQLSTATE FR<status>
-- with the message "ferry: <code>: <detail>". Run like producer.sql, with
-- :queue (max_depth 2, empty) and :topic with a subscription :sub.
\set QUIET on

-- Each call names the queue as %1$L and the topic as %2$L (format()).
CREATE TEMP TABLE names AS SELECT :'queue'::text AS queue, :'topic'::text AS topic;
CREATE TEMP TABLE expect (call text, state text, prefix text);
INSERT INTO expect VALUES
    ($q$SELECT ferry.send('no-such-queue', '1')$q$, 'FR404', 'ferry: not_found: '),
    ($q$SELECT ferry.send(%1$L, '1', '{"bogus": 1}')$q$, 'FR400', 'ferry: invalid_request: '),
    ($q$SELECT ferry.send(%1$L, '1', '{"delay_seconds": -1}')$q$, 'FR400', 'ferry: invalid_request: '),
    ($q$SELECT ferry.send(%1$L, '1', '{"delay_seconds": 1, "deliver_at": "2030-01-01T00:00:00Z"}')$q$, 'FR400', 'ferry: invalid_request: '),
    ($q$SELECT ferry.send(%1$L, '1', '{"attributes": {"k": 1}}')$q$, 'FR400', 'ferry: invalid_request: '),
    ($q$SELECT ferry.send_batch(%1$L, '[]')$q$, 'FR400', 'ferry: invalid_request: '),
    ($q$SELECT ferry.send_batch(%1$L, '[{"body": 1}, {"body": 2}, {"body": 3}]')$q$, 'FR400', 'ferry: invalid_request: '),
    ($q$SELECT ferry.send(%1$L, to_jsonb(repeat('x', 300000)))$q$, 'FR413', 'ferry: payload_too_large: '),
    ($q$SELECT ferry.publish('no-such-topic', 'order.created', '{}')$q$, 'FR404', 'ferry: not_found: '),
    ($q$SELECT ferry.publish(%2$L, 'order.created', '{}', '{"partition": 1}')$q$, 'FR400', 'ferry: invalid_request: '),
    ($q$SELECT ferry.publish(%2$L, '', '{}')$q$, 'FR400', 'ferry: invalid_request: '),
    ($q$SELECT ferry.receive('no-such-queue')$q$, 'FR404', 'ferry: not_found: '),
    ($q$SELECT ferry.receive(%2$L || '/no-such-sub')$q$, 'FR404', 'ferry: not_found: '),
    ($q$SELECT ferry.receive(%1$L, 0)$q$, 'FR400', 'ferry: invalid_request: '),
    ($q$SELECT ferry.nack(%1$L, ARRAY['x'], '{"bogus": true}')$q$, 'FR400', 'ferry: invalid_request: ');

-- The queue holds 2 at most: a third message is refused with 429.
SELECT ferry.send_batch(:'queue', '[{"body": 1}, {"body": 2}]') \g /dev/null
INSERT INTO expect VALUES ($q$SELECT ferry.send(%1$L, '3')$q$, 'FR429', 'ferry: queue_full: ');

DO $$
DECLARE
    e record;
    n record;
    state text;
    msg text;
    bad int := 0;
BEGIN
    SELECT * INTO n FROM names;
    FOR e IN SELECT * FROM expect LOOP
        BEGIN
            EXECUTE format(e.call, n.queue, n.topic);
            RAISE WARNING 'FAIL: % raised nothing (want %)', e.call, e.state;
            bad := bad + 1;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
            IF state <> e.state OR left(msg, length(e.prefix)) <> e.prefix THEN
                RAISE WARNING 'FAIL: % raised % "%" (want % "%...")', e.call, state, msg, e.state, e.prefix;
                bad := bad + 1;
            END IF;
        END;
    END LOOP;
    IF bad > 0 THEN
        RAISE EXCEPTION '% of the calls raised the wrong error', bad;
    END IF;
END $$;

\echo errors.sql: ok
