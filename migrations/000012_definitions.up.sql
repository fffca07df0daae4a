-- The functions of the ferry schema are code, not schema: their text lives
-- in store/definitions/*.sql, and migrations.Up installs it after the
-- numbered migrations, under the migration lock, in one transaction
-- (store/doc.go, "# Definitions"). Tables, indexes, types and roles stay
-- here, in numbered migrations.

-- The definitions installed: their generation (definitions.Generation of
-- the binary that installed them) and the checksum of their files. One
-- row, none before the first install. A binary installs its definitions
-- when the row is missing, older, or of its generation with another
-- checksum; never over a newer generation.
CREATE TABLE ferry.definitions (
    one          boolean     PRIMARY KEY DEFAULT true CHECK (one),
    generation   integer     NOT NULL,
    checksum     text        NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
);

-- Every function as the migrations up to this one made it (its definition
-- and grants), which the down of this migration restores: whatever
-- generation of the definitions was installed since, a database migrated
-- down to 000011 has the functions of one only ever migrated up to it.
CREATE TABLE ferry.definitions_baseline (
    signature  text PRIMARY KEY,
    definition text NOT NULL,
    acl        aclitem[]
);
-- (Signatures and definitions written with every name qualified.)
DO $$
BEGIN
    SET LOCAL search_path = pg_catalog, pg_temp;
    INSERT INTO ferry.definitions_baseline (signature, definition, acl)
    SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.proacl
    FROM pg_proc p WHERE p.pronamespace = 'ferry'::regnamespace AND p.prokind = 'f';
END
$$;

REVOKE ALL ON ferry.definitions, ferry.definitions_baseline FROM PUBLIC;
