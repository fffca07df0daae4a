-- Topics: append-only, partitioned, retained event logs.
CREATE TABLE ferry.topics (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                 text        NOT NULL UNIQUE,
    partitions           integer     NOT NULL DEFAULT 4 CHECK (partitions BETWEEN 1 AND 256),
    retention_seconds    integer     NOT NULL DEFAULT 604800,
    dedup_window_seconds integer     NOT NULL DEFAULT 300,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- One row per partition: the next offset to assign. A publish takes the row
-- lock (UPDATE ... RETURNING) and holds it to its commit, so offsets of a
-- partition are assigned one transaction at a time, in commit order: they
-- are dense, and no reader ever finds a new event at an offset lower than
-- one it has already read (DESIGN.md invariant 6).
CREATE TABLE ferry.topic_partitions (
    topic_id    bigint  NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition)
) WITH (fillfactor = 50);

CREATE TABLE ferry.events (
    topic_id     bigint      NOT NULL,
    partition    integer     NOT NULL,
    "offset"     bigint      NOT NULL,
    id           text        NOT NULL,
    type         text        NOT NULL,
    key          text,
    published_at timestamptz NOT NULL DEFAULT now(),
    attributes   jsonb,
    data         jsonb,
    PRIMARY KEY (topic_id, partition, "offset")
);
-- Reads by time (from_time, seek by time) and retention find their start here.
CREATE INDEX events_time_idx ON ferry.events (topic_id, partition, published_at);

-- Event ids seen within the dedup window, with where the event landed, so a
-- duplicate answers the original partition and offset.
CREATE TABLE ferry.event_dedup (
    topic_id   bigint      NOT NULL,
    event_id   text        NOT NULL,
    partition  integer     NOT NULL,
    "offset"   bigint      NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (topic_id, event_id)
);
CREATE INDEX event_dedup_expiry_idx ON ferry.event_dedup (expires_at);

-- Raises no_data_found (P0002) from inside a statement, so that a pipelined
-- transaction stops when what it writes to has gone (a deleted topic).
CREATE FUNCTION ferry.raise_not_found(what text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = what || ' not found';
END $$;
