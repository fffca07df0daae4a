-- A consumer group's positions, insert-only (issue 21). A fetch that
-- advances a partition and a commit each insert a row here instead of
-- updating ferry.group_partitions, whose row versions would pile up behind
-- a held snapshot and be walked by every poll. A partition's position is
-- the greatest of its ferry.group_partitions column and the newest row
-- here of its epoch (group_partitions.owner_generation): a rebalance or a
-- seek that sets the position anew starts a new epoch, and rows of older
-- epochs count no more. The writer of a row deletes the row it replaced,
-- by its exact key, so the newest row of an epoch is the first entry of
-- the primary key from the top and the read never crosses a dead one.
CREATE TABLE ferry.group_fetches (
    group_id  bigint  NOT NULL,
    partition integer NOT NULL,
    epoch     bigint  NOT NULL,
    "offset"  bigint  NOT NULL, -- the next offset a poll returns
    PRIMARY KEY (group_id, partition, epoch, "offset")
);

CREATE TABLE ferry.group_commits (
    group_id  bigint  NOT NULL,
    partition integer NOT NULL,
    epoch     bigint  NOT NULL,
    "offset"  bigint  NOT NULL, -- offsets up to it are done
    PRIMARY KEY (group_id, partition, epoch, "offset")
);
