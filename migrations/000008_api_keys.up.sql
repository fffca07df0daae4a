-- API keys (API.md § Access control). A key's secret is shown once, when
-- it is made; the table holds only its HMAC-SHA256 under this database's
-- key_hash_key, looked up by the unique index on secret_hash. Secrets are
-- 32 random bytes, so a fast hash is enough (no password hash: nothing to
-- brute-force, and a request must not pay for bcrypt). permissions is the
-- validated list a key was made with (internal/access parses it).
-- last_used_at is written at most about once a minute per key.
CREATE TABLE ferry.api_keys (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text        NOT NULL,
    secret_hash  bytea       NOT NULL UNIQUE,
    permissions  jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    last_used_at timestamptz
);

-- One row: the key of the keyed hash of this database's API keys, made
-- here once. Hashes of one Ferry database match nothing in another's.
CREATE TABLE ferry.api_key_settings (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    key_hash_key bytea   NOT NULL
);
INSERT INTO ferry.api_key_settings (key_hash_key)
VALUES (decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));

-- The audit log (GET /v1/audit): every change a key made or tried, newest
-- first by id. key_name is copied so an entry outlives its key. Retention
-- deletes by at, in bounded batches.
CREATE TABLE ferry.audit_log (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    key_id     bigint,
    key_name   text        NOT NULL,
    action     text        NOT NULL,
    resource   text        NOT NULL,
    request_id text        NOT NULL,
    status     integer     NOT NULL
);
CREATE INDEX audit_log_at_idx ON ferry.audit_log (at);
