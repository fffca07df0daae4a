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
