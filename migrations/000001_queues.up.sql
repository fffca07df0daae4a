-- Ferry work queues. Every Ferry table lives in the "ferry" schema; River's
-- tables are created by River's own migrator in the default schema (see
-- migrations.go for why and how both run under one lock).
CREATE SCHEMA IF NOT EXISTS ferry;

-- A queue: its configuration. A topic subscription will be a queue too (a
-- queue fed by a topic), so the claim engine only ever deals with queue ids.
CREATE TABLE ferry.queues (
    id                         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                       text        NOT NULL UNIQUE,
    visibility_timeout_seconds integer     NOT NULL DEFAULT 30,
    max_receives               integer     NOT NULL DEFAULT 5,
    retention_seconds          integer     NOT NULL DEFAULT 345600,
    delay_seconds              integer     NOT NULL DEFAULT 0,
    dedup_window_seconds       integer     NOT NULL DEFAULT 300,
    max_depth                  bigint      NOT NULL DEFAULT 0,
    retry_min_seconds          integer     NOT NULL DEFAULT 1,
    retry_max_seconds          integer     NOT NULL DEFAULT 300,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now()
);

-- Message ids come from one sequence, so within a queue id order is send
-- order (and, for a group, commit order: sends to a group are serialised).
-- No CACHE: a cache hands each connection its own block of ids, and id
-- order would stop following send order.
CREATE SEQUENCE ferry.message_id_seq AS bigint;

-- Live messages: available, delayed, in flight, or waiting behind the head of
-- their group. Acked messages are deleted; dead letters move to
-- ferry.dead_letters. Claim state:
--   waiting       grouped message that is not its group's head; never claimed
--   visible_at    when the message can next be claimed
--   claim_token   the current lease's token (part of the receipt); NULL when
--                 never claimed or released by nack
CREATE TABLE ferry.messages (
    queue_id      bigint      NOT NULL,
    id            bigint      NOT NULL,
    visible_at    timestamptz NOT NULL,
    waiting       boolean     NOT NULL DEFAULT false,
    receive_count integer     NOT NULL DEFAULT 0,
    claim_token   bigint,
    sent_at       timestamptz NOT NULL DEFAULT now(),
    grp           text,
    dedup_id      text,
    last_error    text,
    attributes    json,
    body          json        NOT NULL,
    PRIMARY KEY (queue_id, id)
) WITH (fillfactor = 90);

-- A queue table turns over constantly: every claim writes a new row version
-- and every ack deletes one. Vacuum it after 2% of it changed (the default
-- is 20%), without cost-based sleeps, so dead tuples stay a small fraction.
ALTER TABLE ferry.messages SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);

-- The claim index: the claim reads it in order and stops after LIMIT rows,
-- so its cost does not grow with the backlog.
CREATE INDEX messages_claim_idx ON ferry.messages (queue_id, visible_at, id) WHERE NOT waiting;
-- Group heads and followers: finding a group's head and its next message are
-- single index probes, whatever the size of the group.
CREATE INDEX messages_group_idx ON ferry.messages (queue_id, grp, waiting, id) WHERE grp IS NOT NULL;

CREATE TABLE ferry.dead_letters (
    queue_id         bigint      NOT NULL,
    id               bigint      NOT NULL,
    sent_at          timestamptz NOT NULL,
    dead_lettered_at timestamptz NOT NULL DEFAULT now(),
    receive_count    integer     NOT NULL,
    grp              text,
    dedup_id         text,
    last_error       text,
    attributes       json,
    body             json        NOT NULL,
    PRIMARY KEY (queue_id, id)
);
CREATE INDEX dead_letters_age_idx ON ferry.dead_letters (queue_id, dead_lettered_at);

-- Dedup ids outlive their messages (an acked message's dedup id still
-- counts until the window ends), so they have a table of their own. The
-- primary key is the dedup check: never read-then-write.
CREATE TABLE ferry.dedup (
    queue_id   bigint      NOT NULL,
    dedup_id   text        NOT NULL,
    message_id bigint      NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue_id, dedup_id)
);
CREATE INDEX dedup_expiry_idx ON ferry.dedup (expires_at);

-- Depth counters, kept by statement-level triggers so that every path that
-- adds or removes messages (send, ack, dead-letter, redrive, purge,
-- retention) keeps them right without remembering to. Each connection
-- writes the slot picked by its backend pid, so concurrent writers to one
-- queue (up to 64 connections) do not wait for each other's commits, and a
-- transaction never holds two slots of one queue. Stats and max_depth read
-- sum() over a queue's slots.
CREATE TABLE ferry.queue_counts (
    queue_id     bigint  NOT NULL,
    slot         integer NOT NULL,
    messages     bigint  NOT NULL DEFAULT 0,
    dead_letters bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, slot)
) WITH (fillfactor = 50);

CREATE FUNCTION ferry.count_slot() RETURNS integer LANGUAGE sql STABLE AS
$$ SELECT pg_backend_pid() % 64 $$;

CREATE FUNCTION ferry.messages_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages)
        SELECT queue_id, ferry.count_slot(), count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET messages = c.messages + excluded.messages;
    ELSE
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages)
        SELECT queue_id, ferry.count_slot(), -count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET messages = c.messages + excluded.messages;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION ferry.dead_letters_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, dead_letters)
        SELECT queue_id, ferry.count_slot(), count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET dead_letters = c.dead_letters + excluded.dead_letters;
    ELSE
        INSERT INTO ferry.queue_counts AS c (queue_id, slot, dead_letters)
        SELECT queue_id, ferry.count_slot(), -count(*) FROM changed GROUP BY queue_id ORDER BY queue_id
        ON CONFLICT (queue_id, slot) DO UPDATE SET dead_letters = c.dead_letters + excluded.dead_letters;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER messages_inserted AFTER INSERT ON ferry.messages
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION ferry.messages_counted();
CREATE TRIGGER messages_deleted AFTER DELETE ON ferry.messages
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION ferry.messages_counted();
CREATE TRIGGER dead_letters_inserted AFTER INSERT ON ferry.dead_letters
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION ferry.dead_letters_counted();
CREATE TRIGGER dead_letters_deleted AFTER DELETE ON ferry.dead_letters
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION ferry.dead_letters_counted();

-- Advisory lock keys. A send holds its queue's key in shared mode (purge and
-- delete take it exclusively) and each of its groups' keys exclusively, so
-- that sends and promotions of one group are serialised.
CREATE FUNCTION ferry.queue_lock_key(queue_id bigint) RETURNS bigint LANGUAGE sql IMMUTABLE AS
$$ SELECT hashtextextended('ferry.queue/' || queue_id, 0) $$;
CREATE FUNCTION ferry.group_lock_key(queue_id bigint, grp text) RETURNS bigint LANGUAGE sql IMMUTABLE AS
$$ SELECT hashtextextended('ferry.group/' || queue_id || '/' || grp, 0) $$;
