-- Consumer groups: Kafka-style readers of a topic's log. Partitions are
-- split among the live members; a group's offsets live here.
CREATE TABLE ferry.consumer_groups (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic_id   bigint      NOT NULL,
    name       text        NOT NULL,
    -- Grows with every change of assignment (and every seek): the fence of
    -- commits and fetches from members that lost a partition.
    generation bigint      NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (topic_id, name)
);

-- Members, evicted when they have not polled within their session timeout.
CREATE TABLE ferry.group_members (
    group_id                bigint      NOT NULL,
    consumer                text        NOT NULL,
    session_timeout_seconds integer     NOT NULL,
    joined_at               timestamptz NOT NULL DEFAULT now(),
    last_seen               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, consumer)
);

-- One row per (group, partition): the committed offset (offsets up to it
-- are done; -1 before any), the owner and the generation in which it got
-- the partition, and the owner's fetch position (the next offset a poll
-- returns). expired_skipped counts events the group never read because
-- retention removed them first.
CREATE TABLE ferry.group_partitions (
    group_id         bigint  NOT NULL,
    partition        integer NOT NULL,
    committed_offset bigint  NOT NULL,
    fetch_offset     bigint  NOT NULL,
    owner            text,
    owner_generation bigint  NOT NULL DEFAULT 0,
    expired_skipped  bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (group_id, partition)
) WITH (fillfactor = 50);
