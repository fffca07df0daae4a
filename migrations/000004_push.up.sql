-- Push delivery: a queue or subscription with push_url is delivered by the
-- server (jobs/push.go) through the same claim engine consumers use.
ALTER TABLE ferry.queues
    ADD COLUMN push_url              text,
    ADD COLUMN push_timeout_seconds  integer NOT NULL DEFAULT 10,
    ADD COLUMN push_max_in_flight    integer NOT NULL DEFAULT 10,
    -- Deliveries started per second; 0 = no limit.
    ADD COLUMN push_rate_limit       integer NOT NULL DEFAULT 0,
    -- Standard Webhooks secrets (whsec_...). During the 24 hours after a
    -- rotation both are used to sign.
    ADD COLUMN signing_secret        text,
    ADD COLUMN previous_secret       text,
    ADD COLUMN previous_secret_until timestamptz,
    -- Since when every attempt has failed (NULL after a success), and
    -- whether and why push is disabled (410 Gone, or failing too long).
    ADD COLUMN push_failing_since    timestamptz,
    ADD COLUMN push_disabled_at      timestamptz,
    ADD COLUMN push_disabled_reason  text;

-- Every push attempt, kept for a bounded time (the retention job deletes
-- older ones in bounded batches).
CREATE TABLE ferry.push_attempts (
    queue_id    bigint      NOT NULL,
    -- The id the receiver saw in webhook-id: the message id, or the event id.
    message_id  text        NOT NULL,
    attempt     integer     NOT NULL,
    ok          boolean     NOT NULL,
    status_code integer,
    error       text,
    duration_ms integer     NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX push_attempts_queue_idx ON ferry.push_attempts (queue_id, at DESC);
CREATE INDEX push_attempts_age_idx ON ferry.push_attempts (at);
