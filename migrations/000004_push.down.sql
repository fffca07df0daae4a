DROP TABLE IF EXISTS ferry.push_attempts;
ALTER TABLE ferry.queues
    DROP COLUMN IF EXISTS push_url, DROP COLUMN IF EXISTS push_timeout_seconds,
    DROP COLUMN IF EXISTS push_max_in_flight, DROP COLUMN IF EXISTS push_rate_limit,
    DROP COLUMN IF EXISTS signing_secret, DROP COLUMN IF EXISTS previous_secret,
    DROP COLUMN IF EXISTS previous_secret_until, DROP COLUMN IF EXISTS push_failing_since,
    DROP COLUMN IF EXISTS push_disabled_at, DROP COLUMN IF EXISTS push_disabled_reason;
