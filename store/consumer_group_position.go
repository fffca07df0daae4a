package store

// A group's positions are insert-only: see the package documentation's
// # Group positions. These are the texts that read them and that write
// them, shared by every statement that does.

// groupFetchSQL is the fetch position (the next offset a poll returns) of
// the partition whose ferry.group_partitions row is gp.
func groupFetchSQL(gp string) string {
	return groupPositionSQL(gp, "fetch_offset", "ferry.group_fetches")
}

// groupCommittedSQL is the committed offset (offsets up to it are done)
// of the partition whose ferry.group_partitions row is gp.
func groupCommittedSQL(gp string) string {
	return groupPositionSQL(gp, "committed_offset", "ferry.group_commits")
}

// groupPositionSQL is the greatest of gp's column and the newest row of
// log in gp's epoch: one probe from the top of log's primary key, which
// the newest row's writer keeps live (it deleted the row it replaced).
func groupPositionSQL(gp, column, log string) string {
	return `greatest(` + gp + `.` + column + `, (SELECT l."offset" FROM ` + log + ` l
		WHERE l.group_id = ` + gp + `.group_id AND l.partition = ` + gp + `.partition AND l.epoch = ` + gp + `.owner_generation
		ORDER BY l."offset" DESC LIMIT 1))`
}

// groupPositionMoveSQL is the CTEs that move positions in log forward:
// for each row of held (partition, epoch, at: the position now) and of
// the arrays $4 (partitions) and $5 (positions) whose position is past
// at, a row is inserted and the row of at, if at was one, deleted (found
// by its key, deleted by ctid: no join order walks the group's rows).
// Concurrent moves of one partition may both delete the same row and
// leave the lesser of theirs: it only loses to the greater, and counts for
// nothing once the epoch ends (groupEpochEndSQL).
func groupPositionMoveSQL(log string) string {
	return `moved AS (
			SELECT h.partition, h.epoch, h.at, m.pos
			FROM held h JOIN unnest($4::int[], $5::bigint[]) AS m(partition, pos) USING (partition)
			WHERE m.pos > h.at
		),
		inserted AS (
			INSERT INTO ` + log + ` (group_id, partition, epoch, "offset")
			SELECT $1, partition, epoch, pos FROM moved
			ON CONFLICT DO NOTHING
		),
		replaced AS (
			DELETE FROM ` + log + ` WHERE ctid = ANY(ARRAY(
				SELECT l.ctid FROM moved m CROSS JOIN LATERAL (
					SELECT ctid FROM ` + log + ` x
					WHERE x.group_id = $1 AND x.partition = m.partition AND x.epoch = m.epoch AND x."offset" = m.at LIMIT 1
				) l))
		)`
}

// groupEpochEndSQL is the CTEs that end the epoch of the partitions of
// group $1 whose ferry.group_partitions row gp matches where, in the
// statement that starts their next (a rebalance, a seek: their only
// writers, under the group's lock). ended (partition, fetched, committed)
// reads each one's newest rows, and those rows are deleted, found by their
// exact keys (a probe each, whatever the epoch left dead below them) and
// deleted by ctid, so that no join order can walk the group's rows. The rows
// a concurrent move left below the newest (groupPositionMoveSQL) stay,
// counting for nothing, until the group is deleted.
func groupEpochEndSQL(where string) string {
	return `ended AS (
			SELECT gp.partition, gp.owner_generation AS epoch,
				(SELECT f."offset" FROM ferry.group_fetches f WHERE f.group_id = gp.group_id AND f.partition = gp.partition
					AND f.epoch = gp.owner_generation ORDER BY f."offset" DESC LIMIT 1) AS fetched,
				(SELECT c."offset" FROM ferry.group_commits c WHERE c.group_id = gp.group_id AND c.partition = gp.partition
					AND c.epoch = gp.owner_generation ORDER BY c."offset" DESC LIMIT 1) AS committed
			FROM ferry.group_partitions gp
			WHERE gp.group_id = $1 AND ` + where + `
		),
		fetches_ended AS (
			DELETE FROM ferry.group_fetches WHERE ctid = ANY(ARRAY(
				SELECT l.ctid FROM ended n CROSS JOIN LATERAL (
					SELECT ctid FROM ferry.group_fetches x
					WHERE x.group_id = $1 AND x.partition = n.partition AND x.epoch = n.epoch AND x."offset" = n.fetched LIMIT 1
				) l))
		),
		commits_ended AS (
			DELETE FROM ferry.group_commits WHERE ctid = ANY(ARRAY(
				SELECT l.ctid FROM ended n CROSS JOIN LATERAL (
					SELECT ctid FROM ferry.group_commits x
					WHERE x.group_id = $1 AND x.partition = n.partition AND x.epoch = n.epoch AND x."offset" = n.committed LIMIT 1
				) l))
		)`
}
