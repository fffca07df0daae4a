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

-- Claim tokens carry, above 53 random bits, where the claim put the row:
-- bits 53..57 hold its partition + 1 (ferry.message_part), and bit 58 is
-- set when the message has a group. A receipt then finds its row with one
-- probe of one partition instead of one per partition (18), and an ack or
-- nack of messages without a group takes no group locks. The row may have
-- moved since (an extend, the rotator's forward to COLD): a probe that
-- misses the named partition looks in all of them (ferry.token_part's
-- callers). A token of an earlier release names no partition (bits 0):
-- it is looked for everywhere and counts as grouped. Nothing else reads
-- a token: it is compared whole, and a forged one matches no row.
CREATE OR REPLACE FUNCTION ferry.claim_token(p_part smallint, p_grouped boolean) RETURNS bigint
    LANGUAGE sql VOLATILE AS $$
    SELECT (random() * 9007199254740991)::bigint | ((p_part + 1)::bigint << 53)
        | CASE WHEN p_grouped THEN 288230376151711744 ELSE 0 END
$$;
REVOKE ALL ON FUNCTION ferry.claim_token(smallint, boolean) FROM PUBLIC;

-- The partition a claim token names, or -1 (no partition) for a token of
-- an earlier release.
CREATE OR REPLACE FUNCTION ferry.token_part(p_token bigint) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (((p_token >> 53) & 31) - 1)::smallint
$$;

-- Whether any of the tokens may be a message with a group: one says so,
-- or is of an earlier release.
CREATE OR REPLACE FUNCTION ferry.tokens_grouped(p_tokens bigint[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT EXISTS (SELECT 1 FROM unnest(p_tokens) AS t(token) WHERE (t.token >> 53) & 31 = 0 OR (t.token >> 58) & 1 = 1)
$$;
