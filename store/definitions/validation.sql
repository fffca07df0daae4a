-- The rules of a message or an event that REST checks in Go, once each
-- for the SQL API.

-- The deepest a message's body or an event's data may nest, as
-- encoding/json counts levels ([] and {} are one, a scalar none): REST's
-- handlers.MaxValueDepth (TestSQLRulesAsREST holds the two to one
-- value). Every answer that carries such a value stays within the 10000
-- levels encoding/json reads and writes, the deepest being a
-- subscription's {"messages":[{"event":{"data": ...}}]}.
CREATE OR REPLACE FUNCTION ferry.max_value_depth() RETURNS integer LANGUAGE sql IMMUTABLE AS $$
    SELECT 9996
$$;
REVOKE ALL ON FUNCTION ferry.max_value_depth() FROM PUBLIC;

-- Whether v nests deeper than ferry.max_value_depth(); text_bytes is the
-- length of v's text, which the callers have at hand. A level takes at
-- least two bytes of text, so only a value longer than twice the limit
-- is walked (one jsonpath pass over it: a container at level
-- max_value_depth(), the root being level 0); any other costs a
-- comparison.
CREATE OR REPLACE FUNCTION ferry.json_too_deep(v jsonb, text_bytes bigint) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN text_bytes <= 2 * ferry.max_value_depth() THEN false
        ELSE jsonb_path_exists(v, format('strict $.**{%s} ? (@.type() == "array" || @.type() == "object")',
            ferry.max_value_depth())::jsonpath) END
$$;
REVOKE ALL ON FUNCTION ferry.json_too_deep(jsonb, bigint) FROM PUBLIC;

-- The size of s as a JSON string encoded by Go's encoding/json (as REST
-- encodes attributes): quotes, \" \\ \b \f \n \r \t, \u00XX for other
-- control characters and for < > &, \u2028 and \u2029.
CREATE OR REPLACE FUNCTION ferry.send_go_string_size(s text) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT 2 + octet_length(s)
        + (length(s) - length(translate(s, E'"\\\b\f\n\r\t', '')))
        + 5 * (length(s) - length(translate(s, E'\x01\x02\x03\x04\x05\x06\x07\x0b\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f<>&', '')))
        + 3 * (length(s) - length(translate(s, E'\u2028\u2029', '')))
$$;
REVOKE ALL ON FUNCTION ferry.send_go_string_size(text) FROM PUBLIC;

-- The size of attributes (an object of strings, a null value being "")
-- as REST encodes them, Go's encoding/json of a map[string]string
-- (ferry.send_go_string_size): what counts against the body limit with a
-- body or an event's data. NULL for {}.
-- (PL/pgSQL, not SQL: a SQL function's statement would be planned again
-- at every call.)
CREATE OR REPLACE FUNCTION ferry.attributes_size(attrs jsonb) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN (SELECT 1 + sum(ferry.send_go_string_size(a.key) + 1 + ferry.send_go_string_size(coalesce(a.value, '')) + 1)
        FROM jsonb_each_text(attrs) AS a);
END $$;
REVOKE ALL ON FUNCTION ferry.attributes_size(jsonb) FROM PUBLIC;

-- The size of j as compact JSON text (jsonb writes a space after each ':'
-- and ','; strings are kept whole): what REST counts against the body
-- limit. The one size rule of bodies and events' data.
CREATE OR REPLACE FUNCTION ferry.json_compact_size(j jsonb) RETURNS bigint LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT octet_length(t) - (length(s) - length(replace(s, ' ', '')))
    FROM (SELECT j::text AS t) a
    CROSS JOIN LATERAL (SELECT regexp_replace(a.t, E'"(\\\\.|[^"\\\\])*"', '', 'g') AS s) b
$$;
REVOKE ALL ON FUNCTION ferry.json_compact_size(jsonb) FROM PUBLIC;

-- Whether v is a W3C trace context traceparent, REST's rule
-- (internal/rules.ValidTraceparent in Go). The one traceparent rule of sends and
-- publishes.
CREATE OR REPLACE FUNCTION ferry.valid_traceparent(v text) RETURNS boolean LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT v ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[!-~]*)?$'
        AND left(v, 2) <> 'ff'
        AND substr(v, 4, 32) <> repeat('0', 32)
        AND substr(v, 37, 16) <> repeat('0', 16)
        AND (octet_length(v) = 55 OR left(v, 2) <> '00')
$$;
REVOKE ALL ON FUNCTION ferry.valid_traceparent(text) FROM PUBLIC;

-- The JSON type of v as REST's type errors name it, encoding/json's words
-- (bool, number, string, array, object, null): "must be a string, not
-- number". with_number adds a number's text ("number 1.5"), as
-- encoding/json names a number an integer field cannot take; the SQL
-- API's sends name every number so. The one JSON-kind rule.
CREATE OR REPLACE FUNCTION ferry.json_kind(v jsonb, with_number boolean DEFAULT false) RETURNS text
    LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE jsonb_typeof(v)
        WHEN 'boolean' THEN 'bool'
        WHEN 'number' THEN CASE WHEN with_number THEN 'number ' || v::text ELSE 'number' END
        ELSE jsonb_typeof(v) END
$$;
REVOKE ALL ON FUNCTION ferry.json_kind(jsonb, boolean) FROM PUBLIC;

-- Whether s is a date-time as REST reads one (RFC 3339, Go's time.Time).
CREATE OR REPLACE FUNCTION ferry.send_valid_time(s text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF s !~ '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$' THEN
        RETURN false;
    END IF;
    RETURN substr(s, 1, 4)::integer >= 1 AND substr(s, 9, 2)::integer
        <= extract(day FROM make_date(substr(s, 1, 4)::integer, substr(s, 6, 2)::integer, 1) + interval '1 month - 1 day');
END $$;
REVOKE ALL ON FUNCTION ferry.send_valid_time(text) FROM PUBLIC;

-- The instant of a deliver_at that ferry.send_valid_time accepted: its
-- date and time less its offset, as REST reads it. (Not ::timestamptz:
-- PostgreSQL's input refuses offsets beyond 15:59, which RFC 3339 allows
-- up to 23:59.) NULL for NULL. (Not STRICT, so that it is inlined.)
CREATE OR REPLACE FUNCTION ferry.send_deliver_at(s text) RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN right(s, 1) = 'Z' THEN left(s, -1)::timestamp
        ELSE left(s, -6)::timestamp - (CASE WHEN substr(s, length(s) - 5, 1) = '-' THEN -1 ELSE 1 END)
            * make_interval(hours => substr(s, length(s) - 4, 2)::integer, mins => right(s, 2)::integer) END
        AT TIME ZONE 'UTC'
$$;
REVOKE ALL ON FUNCTION ferry.send_deliver_at(text) FROM PUBLIC;
