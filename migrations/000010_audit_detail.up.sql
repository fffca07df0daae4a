-- The audit log keeps, beside Ferry's own request id, the X-Request-Id the
-- client sent (bounded and checked; NULL when none), and the hosts of a
-- push URL a request changed or tried to change (NULL when it changed
-- none; a first URL has no from host, a removed one no to host). Hosts
-- only: a URL's path and query may hold tokens. Nullable columns without
-- a default: the previous release's INSERTs keep working, and adding them
-- rewrites nothing.
ALTER TABLE ferry.audit_log
    ADD COLUMN client_request_id text,
    ADD COLUMN push_from_host    text,
    ADD COLUMN push_to_host      text;
