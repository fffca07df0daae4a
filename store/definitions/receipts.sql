-- Receipts are store.Receipt's encoding: base64url without padding of the
-- message id and the claim token, each 8 bytes big-endian. Decoding is as
-- strict as store.ParseReceipt: exactly 22 characters of the alphabet,
-- the last one without stray bits (anything else decodes to NULLs).
CREATE OR REPLACE FUNCTION ferry.receipt_encode(p_id bigint, p_token bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT rtrim(translate(encode(int8send(p_id) || int8send(p_token), 'base64'), '+/', '-_'), '=')
$$;
REVOKE ALL ON FUNCTION ferry.receipt_encode(bigint, bigint) FROM PUBLIC;

-- (A set-returning SQL function, none for a malformed receipt, so that
-- the planner inlines it where it is used.)
CREATE OR REPLACE FUNCTION ferry.receipt_decode(p_receipt text) RETURNS TABLE(id bigint, token bigint)
    LANGUAGE sql IMMUTABLE AS $$
    SELECT ('x' || encode(substr(d.b, 1, 8), 'hex'))::bit(64)::bigint, ('x' || encode(substr(d.b, 9, 8), 'hex'))::bit(64)::bigint
    FROM (
        -- CASE: decode() must never see what the pattern refuses.
        SELECT CASE WHEN p_receipt ~ '^[A-Za-z0-9_-]{21}[AQgw]$' COLLATE "C"
            THEN decode(translate(p_receipt, '-_', '+/') || '==', 'base64') END AS b
    ) d
    WHERE d.b IS NOT NULL
$$;
REVOKE ALL ON FUNCTION ferry.receipt_decode(text) FROM PUBLIC;
