package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ConsumerGroupCommitParams commits offsets of a member.
type ConsumerGroupCommitParams struct {
	Topic      Topic
	Group      string
	Consumer   string
	Generation int64
	// Offsets: partition → the last offset done.
	Offsets map[int]int64
}

// ConsumerGroupCommit records, for each partition, that offsets up to the given
// one are done — all or none: if the consumer does not own one of the
// partitions in the generation it names (it was rebalanced away), nothing
// is committed and [ErrFenced] is returned. Commits only move forward (a
// lower offset than the committed one is kept as is); seek moves back.
// An offset beyond the partition's head is refused.
func ConsumerGroupCommit(ctx context.Context, db TxBeginner, p ConsumerGroupCommitParams) error {
	parts := make([]int32, 0, len(p.Offsets))
	offs := make([]int64, 0, len(p.Offsets))
	for part, off := range p.Offsets {
		parts = append(parts, int32(part))
		offs = append(offs, off)
	}
	err := retry(ctx, func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var (
				gid, gen int64
				planner  string
			)
			err := tx.QueryRow(ctx, `/* ferry:consumer_group_read */ SELECT id, generation, `+groupPlannerSQL+` FROM ferry.consumer_groups WHERE topic_id = $1 AND name = $2`,
				p.Topic.ID, p.Group).Scan(&gid, &gen, &planner)
			if err != nil {
				return err
			}
			var beyond *int32
			if err := tx.QueryRow(ctx, `/* ferry:consumer_group_commit_check */
				SELECT min(v.partition) FROM unnest($2::int[], $3::bigint[]) AS v(partition, off)
				LEFT JOIN ferry.topic_partitions tp ON tp.topic_id = $1 AND tp.partition = v.partition
				WHERE tp.partition IS NULL OR v.off >= `+partitionNextSQL("tp")+``, p.Topic.ID, parts, offs).Scan(&beyond); err != nil {
				return err
			}
			if beyond != nil {
				return &ValidationError{Field: fmt.Sprintf("offsets.%d", *beyond), Message: "is beyond the partition's head offset (or the partition does not exist)"}
			}
			if p.Generation > gen {
				return ErrFenced
			}
			var n int
			err = tx.QueryRow(ctx, `/* ferry:consumer_group_commit */
				WITH seen AS (`+memberSeenSQL+`),
				held AS (
					SELECT gp.partition, gp.owner_generation AS epoch, `+groupCommittedSQL("gp")+` AS at
					FROM ferry.group_partitions gp
					WHERE gp.group_id = $1 AND gp.partition = ANY($4) AND gp.owner = $2 AND gp.owner_generation <= $3
					FOR SHARE
				),
				`+groupPositionMoveSQL("ferry.group_commits")+`
				SELECT count(*) FROM held`, gid, p.Consumer, p.Generation, parts, offs).Scan(&n)
			if err != nil {
				return err
			}
			if n != len(parts) {
				return ErrFenced // rolls the others back
			}
			return nil
		})
	})
	if errors.Is(err, ErrFenced) {
		return ErrFenced
	}
	var verr *ValidationError
	if errors.As(err, &verr) {
		return verr
	}
	return interpretError("group commit", err)
}

// ConsumerGroupSeekParams moves a group: to Start, or to explicit Offsets
// (partition → the next offset to read).
type ConsumerGroupSeekParams struct {
	Topic   Topic
	Group   string
	Start   StartPosition
	Latest  bool
	Offsets map[int]int64
}

// ConsumerGroupSeek moves the group's committed offsets (and its members' fetch
// positions) and bumps the generation, so commits of batches read before
// the seek are fenced. Each partition it moves starts an epoch of its
// positions (owner_generation is the new generation, owned or not), so
// the rows of the old one, greater or not, count no more. Latest: the next event published; Earliest: the
// oldest retained; Time: the first published at or after it; Offsets: the
// given next offsets (partitions not named keep theirs).
func ConsumerGroupSeek(ctx context.Context, db TxBeginner, p ConsumerGroupSeekParams) error {
	var (
		parts []int32
		nexts []int64
	)
	for part, off := range p.Offsets {
		parts = append(parts, int32(part))
		nexts = append(nexts, off)
	}
	mode := "offsets"
	switch {
	case p.Offsets != nil:
	case p.Start.Earliest:
		mode = "earliest"
	case p.Start.Time != nil:
		mode = "time"
	default:
		mode = "latest"
	}
	err := retry(ctx, func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var (
				gid     int64
				planner string
			)
			err := tx.QueryRow(ctx, `/* ferry:consumer_group_lock */ SELECT id, `+groupPlannerSQL+` FROM ferry.consumer_groups WHERE topic_id = $1 AND name = $2 FOR UPDATE`,
				p.Topic.ID, p.Group).Scan(&gid, &planner)
			if err != nil {
				return err
			}
			if mode == "offsets" {
				var bad *int32
				if err := tx.QueryRow(ctx, `/* ferry:consumer_group_seek_check */
					SELECT min(v.partition) FROM unnest($2::int[], $3::bigint[]) AS v(partition, off)
					LEFT JOIN ferry.topic_partitions tp ON tp.topic_id = $1 AND tp.partition = v.partition
					WHERE tp.partition IS NULL OR v.off > `+partitionNextSQL("tp")+``, p.Topic.ID, parts, nexts).Scan(&bad); err != nil {
					return err
				}
				if bad != nil {
					return &ValidationError{Field: fmt.Sprintf("offsets.%d", *bad), Message: "is beyond the partition's next offset (or the partition does not exist)"}
				}
			}
			var gen int64
			if err := tx.QueryRow(ctx, `/* ferry:consumer_group_generation_bump */ UPDATE ferry.consumer_groups SET generation = generation + 1 WHERE id = $1 RETURNING generation`, gid).Scan(&gen); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `/* ferry:consumer_group_seek */
				WITH `+groupEpochEndSQL(`($4 <> 'offsets' OR gp.partition = ANY($6))`)+`
				UPDATE ferry.group_partitions gp SET committed_offset = c.committed, fetch_offset = c.committed + 1,
					owner_generation = $3
				FROM ferry.topic_partitions tp
				CROSS JOIN LATERAL (
					SELECT CASE $4
						WHEN 'earliest' THEN coalesce((SELECT "offset" FROM ferry.events WHERE topic_id = $2 AND partition = tp.partition ORDER BY "offset" LIMIT 1), `+partitionNextSQL("tp")+`) - 1
						WHEN 'time' THEN coalesce(
							(SELECT "offset" FROM ferry.events WHERE topic_id = $2 AND partition = tp.partition AND published_at >= $5
							 ORDER BY published_at, "offset" LIMIT 1), `+partitionNextSQL("tp")+`) - 1
						WHEN 'latest' THEN `+partitionNextSQL("tp")+` - 1
						ELSE (SELECT v.off - 1 FROM unnest($6::int[], $7::bigint[]) AS v(partition, off) WHERE v.partition = tp.partition)
						END AS committed
				) c
				WHERE gp.group_id = $1 AND tp.topic_id = $2 AND tp.partition = gp.partition AND c.committed IS NOT NULL`,
				gid, p.Topic.ID, gen, mode, p.Start.Time, parts, nexts)
			return err
		})
	})
	var verr *ValidationError
	if errors.As(err, &verr) {
		return verr
	}
	return interpretError("group seek", err)
}
