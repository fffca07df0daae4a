-- An event as a subscription's delivery carries it (the body of its
-- ferry.messages row), in the shape GET /v1/topics/{topic}/events shows.
CREATE OR REPLACE FUNCTION ferry.event_json(id text, type text, key text, data jsonb, attributes jsonb,
        part integer, off bigint, published_at timestamptz) RETURNS json
    LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', id, 'type', type, 'key', key, 'data', data,
        'attributes', coalesce(attributes, '{}'::jsonb),
        'partition', part, 'offset', off,
        'published_at', to_char(published_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::json
$$;

-- A subscription's delivery body (event) with its CloudEvents attributes:
-- a body written before CloudEvents support has none and gets those of a
-- plain JSON event of topic (the default source, its published_at as
-- time, application/json, extensions {}); store.CloudDelivery in Go, the
-- one rule of both.
CREATE OR REPLACE FUNCTION ferry.event_cloud_defaults(event jsonb, topic text) RETURNS jsonb
    LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN jsonb_typeof(event) <> 'object' OR event ? 'source' OR event ->> 'published_at' IS NULL THEN event
        ELSE event || jsonb_build_object('source', '/ferry/topics/' || topic,
            'time', to_char((event ->> 'published_at')::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
            'datacontenttype', 'application/json', 'extensions', '{}'::jsonb) END
$$;
REVOKE ALL ON FUNCTION ferry.event_cloud_defaults(jsonb, text) FROM PUBLIC;

-- The partition of a keyed event: FNV-1a 32-bit of the key's UTF-8 bytes,
-- as an unsigned integer, modulo the partitions (store.PartitionForKey).
CREATE OR REPLACE FUNCTION ferry.partition_for_key(key text, partitions integer) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    b bytea := convert_to(key, 'UTF8');
    h bigint := 2166136261;
BEGIN
    FOR i IN 0 .. length(b) - 1 LOOP
        h := ((h # get_byte(b, i)) * 16777619) & 4294967295;
    END LOOP;
    RETURN (h % partitions)::integer;
END $$;
REVOKE ALL ON FUNCTION ferry.partition_for_key(text, integer) FROM PUBLIC;
