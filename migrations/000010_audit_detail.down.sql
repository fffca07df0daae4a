ALTER TABLE ferry.audit_log
    DROP COLUMN IF EXISTS client_request_id,
    DROP COLUMN IF EXISTS push_from_host,
    DROP COLUMN IF EXISTS push_to_host;
