-- Errors: how the engine and the SQL API refuse.

-- What REST answers with a 4xx, the SQL API raises: SQLSTATE FR<status>
-- (FR400, FR404, FR409, FR413, FR429) and the message
-- "ferry: <code>: <detail>", <code> being the REST problem code.
CREATE OR REPLACE FUNCTION ferry.raise(status integer, code text, detail text) RETURNS bigint
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'FR' || status::text, MESSAGE = 'ferry: ' || code || ': ' || detail;
END $$;
REVOKE ALL ON FUNCTION ferry.raise(integer, text, text) FROM PUBLIC;

-- Raises no_data_found (P0002) from inside a statement, so that a pipelined
-- transaction stops when what it writes to has gone (a deleted topic).
CREATE OR REPLACE FUNCTION ferry.raise_not_found(what text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = what || ' not found';
END $$;

-- Raises serialization_failure (40001): the store runs the transaction
-- again from the start.
CREATE OR REPLACE FUNCTION ferry.raise_retry(what text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'serialization_failure', MESSAGE = what;
END $$;
