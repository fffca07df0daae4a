-- The four helpers as migration 000009 made them (their text unchanged):
-- the SQL API's functions of migrations 000009 and 000011, which the down
-- of migration 000012 puts back, call them.

-- The JSON type of v as REST's type errors name it (the decoder's words).
CREATE FUNCTION ferry.send_json_kind(v jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE jsonb_typeof(v) WHEN 'boolean' THEN 'bool' WHEN 'number' THEN 'number ' || v::text ELSE jsonb_typeof(v) END
$$;
REVOKE ALL ON FUNCTION ferry.send_json_kind(jsonb) FROM PUBLIC;

-- The size of v's compact JSON encoding (REST measures bodies so):
-- jsonb's text without the space it writes after each ':' and ','.
CREATE FUNCTION ferry.send_compact_size(v jsonb) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT octet_length(v::text) - coalesce((
        SELECT sum(CASE jsonb_typeof(x)
            WHEN 'object' THEN greatest(2 * (SELECT count(*) FROM jsonb_object_keys(x)) - 1, 0)
            WHEN 'array' THEN greatest(jsonb_array_length(x) - 1, 0)
            ELSE 0 END)
        FROM jsonb_path_query(v, 'strict $.**') AS x
        WHERE jsonb_typeof(x) IN ('object', 'array')), 0)
$$;
REVOKE ALL ON FUNCTION ferry.send_compact_size(jsonb) FROM PUBLIC;

-- Whether v is a W3C trace context traceparent (rules.ValidTraceparent in
-- Go).
CREATE FUNCTION ferry.send_valid_traceparent(v text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT v ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[!-~]*)?$'
        AND left(v, 2) <> 'ff'
        AND substr(v, 4, 32) <> repeat('0', 32)
        AND substr(v, 37, 16) <> repeat('0', 16)
        AND (length(v) = 55 OR left(v, 2) <> '00')
$$;
REVOKE ALL ON FUNCTION ferry.send_valid_traceparent(text) FROM PUBLIC;

-- The JSON kind of v as REST's messages name it ("must be a string, not
-- number").
CREATE FUNCTION ferry.publish_kind(v jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE jsonb_typeof(v) WHEN 'boolean' THEN 'bool' ELSE jsonb_typeof(v) END
$$;
REVOKE ALL ON FUNCTION ferry.publish_kind(jsonb) FROM PUBLIC;
