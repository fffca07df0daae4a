-- What SigV4 verification needs (API.md § SQS-compatible API): a key's
-- secret itself, since a signature is an HMAC keyed by it and a hash of
-- the secret cannot check one. It is kept sealed (AES-256-GCM) under the
-- server key of the environment (FERRY_SECRET_KEY), bound to the row's id,
-- so that a dump of the database alone yields no usable secret; the
-- format is store.KeySealer's. NULL: a key made before this migration or
-- while no server key was configured; it works over REST (secret_hash)
-- and not over SQS. Nullable without a default: adding it rewrites
-- nothing, and the previous release's INSERTs keep working.
ALTER TABLE ferry.api_keys ADD COLUMN sealed_secret bytea;
