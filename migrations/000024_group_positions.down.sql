-- Fold the positions back into ferry.group_partitions, where the binaries
-- before migration 24 keep them, then drop the tables.
UPDATE ferry.group_partitions gp SET
    fetch_offset = greatest(gp.fetch_offset, (SELECT max(f."offset") FROM ferry.group_fetches f
        WHERE f.group_id = gp.group_id AND f.partition = gp.partition AND f.epoch = gp.owner_generation)),
    committed_offset = greatest(gp.committed_offset, (SELECT max(c."offset") FROM ferry.group_commits c
        WHERE c.group_id = gp.group_id AND c.partition = gp.partition AND c.epoch = gp.owner_generation));

DROP TABLE ferry.group_fetches;
DROP TABLE ferry.group_commits;
