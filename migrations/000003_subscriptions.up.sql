-- Subscriptions: a subscription is a queue fed by a topic. It is a row of
-- ferry.queues with topic_id set, so the claim engine (receive, ack, nack,
-- extend, dead letters, redrive, stats, retention) serves it unchanged.
-- Each delivery is a row of ferry.messages holding a copy of the event:
-- pending deliveries outlive the event log's retention and expire by the
-- subscription's own retention_seconds.
ALTER TABLE ferry.queues
    ADD COLUMN topic_id bigint,
    -- The filter as the client gave it (NULL: every event).
    ADD COLUMN filter   jsonb,
    -- Ordered: deliveries of events sharing a key form a group (grp = key).
    ADD COLUMN ordered  boolean NOT NULL DEFAULT false;

-- Queue names are unique among queues; subscription names within a topic.
ALTER TABLE ferry.queues DROP CONSTRAINT queues_name_key;
CREATE UNIQUE INDEX queues_name_idx ON ferry.queues (name) WHERE topic_id IS NULL;
CREATE UNIQUE INDEX subscriptions_name_idx ON ferry.queues (topic_id, name) WHERE topic_id IS NOT NULL;

-- A publish matches events against the subscriptions it read before it
-- locked the topic's partitions. Every subscription change bumps
-- subs_version under those locks, and a publish checks, once it holds them,
-- that the version is the one it read (else it starts again): so a
-- subscription change and a publish are ordered, and a publish never
-- writes deliveries for a deleted subscription or with an old filter.
ALTER TABLE ferry.topics ADD COLUMN subs_version bigint NOT NULL DEFAULT 0;

-- A delivery's event: its id is the id clients see (receive, dead letters,
-- redrive); its position (partition, offset) identifies it, since an id
-- may be published again once its dedup window ends. The position is
-- unique among a subscription's live deliveries, so a backfill or seek
-- never doubles a pending delivery.
ALTER TABLE ferry.messages
    ADD COLUMN event_id        text,
    ADD COLUMN event_partition integer,
    ADD COLUMN event_offset    bigint;
CREATE UNIQUE INDEX messages_event_idx ON ferry.messages (queue_id, event_partition, event_offset)
    WHERE event_offset IS NOT NULL;
ALTER TABLE ferry.dead_letters
    ADD COLUMN event_id        text,
    ADD COLUMN event_partition integer,
    ADD COLUMN event_offset    bigint;
CREATE INDEX dead_letters_event_idx ON ferry.dead_letters (queue_id, event_id) WHERE event_id IS NOT NULL;

-- Raises serialization_failure (40001): the store runs the transaction
-- again from the start.
CREATE FUNCTION ferry.raise_retry(what text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'serialization_failure', MESSAGE = what;
END $$;

-- An event as a subscription's delivery carries it (the body of its
-- ferry.messages row), in the shape GET /v1/topics/{topic}/events shows.
CREATE FUNCTION ferry.event_json(id text, type text, key text, data jsonb, attributes jsonb,
        part integer, off bigint, published_at timestamptz) RETURNS json
    LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', id, 'type', type, 'key', key, 'data', data,
        'attributes', coalesce(attributes, '{}'::jsonb),
        'partition', part, 'offset', off,
        'published_at', to_char(published_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::json
$$;
