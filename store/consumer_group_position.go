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
// at, a row is inserted and the row of at, if at was one, deleted.
// Concurrent moves of one partition may both delete the same row and
// leave the lesser of theirs: it only loses to the greater, and goes when
// the epoch does (groupPositionsPruneSQL).
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
			DELETE FROM ` + log + ` l USING moved m
			WHERE l.group_id = $1 AND l.partition = m.partition AND l.epoch = m.epoch AND l."offset" = m.at
		)`
}

// groupPositionsPruneSQL deletes the rows of both logs of group $1 whose
// epoch is over (below their partition's). It runs with the moves that
// start an epoch (a rebalance, a seek), under the group's lock; behind a
// held snapshot it reads the rows it deleted before, which is why no poll
// runs it.
const groupPositionsPruneSQL = `/* ferry:consumer_group_positions_prune */
	WITH fetches AS (
		DELETE FROM ferry.group_fetches l USING ferry.group_partitions gp
		WHERE l.group_id = $1 AND gp.group_id = $1 AND gp.partition = l.partition AND l.epoch < gp.owner_generation
	)
	DELETE FROM ferry.group_commits l USING ferry.group_partitions gp
	WHERE l.group_id = $1 AND gp.group_id = $1 AND gp.partition = l.partition AND l.epoch < gp.owner_generation`
