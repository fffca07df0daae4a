package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Consumer groups read a topic's log Kafka-style: the partitions are split
// among the group's live members, each member reads its partitions in
// offset order from its fetch position, and commits offsets it finished.
//
// Membership is lazy and needs no leader: every poll (and describe) runs
// consumerGroupRefresh under the group row's lock, which evicts members whose
// session timed out, gives partitions of departed members to live ones and
// spreads partitions evenly over members, moving as few as it can
// (sticky). Every change of assignment bumps the group's generation; a
// partition remembers the generation in which its owner got it. A commit
// or a fetch applies to a partition only if the caller owns it and got it
// in the generation it names or earlier: a member that lost a partition
// (a zombie) is fenced, and a new owner starts at committed + 1.

// ErrFenced refuses a commit for a partition the consumer does not own in
// the generation it names.
var ErrFenced = fmt.Errorf("%w: the consumer does not own the partition in that generation", ErrConflict)

// ConsumerGroup is a consumer group as described.
type ConsumerGroup struct {
	ID         int64
	Name       string
	Generation int64
	CreatedAt  time.Time
	Members    []ConsumerGroupMember
	Partitions []ConsumerGroupPartition
	// Refresh is what describing the group changed in passing.
	Refresh ConsumerGroupRefresh
}

// ConsumerGroupMember is a live member of a group.
type ConsumerGroupMember struct {
	Consumer              string
	Partitions            []int
	LastSeen              time.Time
	SessionTimeoutSeconds int
}

// ConsumerGroupPartition is a group's position on one partition of its topic.
type ConsumerGroupPartition struct {
	Partition       int
	CommittedOffset int64
	HeadOffset      int64
	Lag             int64
	Owner           *string
	// ExpiredSkipped counts events the group never read because retention
	// removed them first (its committed offset was moved to the oldest
	// retained event).
	ExpiredSkipped int64
}

// ConsumerGroupDescribe refreshes the group (evictions, rebalance, retention) and
// describes it: live members, and per partition the committed offset,
// head, lag and owner.
func ConsumerGroupDescribe(ctx context.Context, db TxBeginner, t Topic, name string) (ConsumerGroup, error) {
	var g ConsumerGroup
	err := retry(ctx, func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			st, err := consumerGroupRefresh(ctx, tx, t, name, "", 0, nil)
			if err != nil {
				return err
			}
			g = ConsumerGroup{ID: st.id, Name: name, Generation: st.generation, Refresh: st.ConsumerGroupRefresh}
			if err := tx.QueryRow(ctx, `/* ferry:consumer_group_describe */ SELECT created_at FROM ferry.consumer_groups WHERE id = $1`, st.id).Scan(&g.CreatedAt); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `/* ferry:consumer_group_describe_members */
				SELECT consumer, last_seen, session_timeout_seconds FROM ferry.group_members WHERE group_id = $1 ORDER BY consumer`, g.ID)
			if err != nil {
				return err
			}
			g.Members, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ConsumerGroupMember, error) {
				var m ConsumerGroupMember
				return m, row.Scan(&m.Consumer, &m.LastSeen, &m.SessionTimeoutSeconds)
			})
			if err != nil {
				return err
			}
			rows, err = tx.Query(ctx, `/* ferry:consumer_group_describe_partitions */
				SELECT gp.partition, `+groupCommittedSQL("gp")+`, `+partitionNextSQL("tp")+` - 1, gp.owner, gp.expired_skipped
				FROM ferry.group_partitions gp
				JOIN ferry.topic_partitions tp ON tp.topic_id = $2 AND tp.partition = gp.partition
				WHERE gp.group_id = $1 ORDER BY gp.partition`, g.ID, t.ID)
			if err != nil {
				return err
			}
			g.Partitions, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ConsumerGroupPartition, error) {
				var p ConsumerGroupPartition
				err := row.Scan(&p.Partition, &p.CommittedOffset, &p.HeadOffset, &p.Owner, &p.ExpiredSkipped)
				p.Lag = max(0, p.HeadOffset-p.CommittedOffset)
				return p, err
			})
			return err
		})
	})
	if err != nil {
		return ConsumerGroup{}, interpretError("group describe", err)
	}
	byMember := map[string]int{}
	for i, m := range g.Members {
		byMember[m.Consumer] = i
		g.Members[i].Partitions = []int{}
	}
	for _, p := range g.Partitions {
		if p.Owner != nil {
			if i, ok := byMember[*p.Owner]; ok {
				g.Members[i].Partitions = append(g.Members[i].Partitions, p.Partition)
			}
		}
	}
	return g, nil
}

// ConsumerGroupListParams selects one page of [ConsumerGroupList].
type ConsumerGroupListParams struct {
	TopicID int64
	After   string // only groups named after this one ("" = from the first)
	Limit   int    // at most this many; 0 = every one
}

// ConsumerGroupList returns the names of the topic's groups named after p.After,
// in order, at most p.Limit of them, and whether more follow: a keyset page
// read from the (topic_id, name) unique index.
func ConsumerGroupList(ctx context.Context, db DBTX, p ConsumerGroupListParams) ([]string, bool, error) {
	rows, err := db.Query(ctx, `
		SELECT name FROM ferry.consumer_groups WHERE topic_id = $1 AND name > $2 ORDER BY name LIMIT $3`,
		p.TopicID, p.After, pageLimit(p.Limit))
	if err != nil {
		return nil, false, interpretError("group list", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, false, interpretError("group list", err)
	}
	names, more := pageCut(names, p.Limit)
	return names, more, nil
}

// ConsumerGroupDelete deletes the group, its members and positions.
func ConsumerGroupDelete(ctx context.Context, db TxBeginner, t Topic, name string) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var id int64
		if err := tx.QueryRow(ctx, `DELETE FROM ferry.consumer_groups WHERE topic_id = $1 AND name = $2 RETURNING id`, t.ID, name).Scan(&id); err != nil {
			return err
		}
		return consumerGroupDeleteRows(ctx, tx, []int64{id})
	})
	return interpretError("group delete", err)
}

// ConsumerGroupLag is one row of [ConsumerGroupLags]: a partition's lag,
// or (Partition -1) the number of members in Lag.
type ConsumerGroupLag struct {
	TopicID   int64
	Group     string
	Partition int
	Lag       int64
}

// ConsumerGroupLags reads every group's lag per partition and member count, in
// one statement, without changing anything (for metrics).
func ConsumerGroupLags(ctx context.Context, db DBTX) ([]ConsumerGroupLag, error) {
	rows, err := db.Query(ctx, `
		SELECT g.topic_id, g.name, gp.partition, greatest(0, `+partitionNextSQL("tp")+` - 1 - `+groupCommittedSQL("gp")+`)
		FROM ferry.consumer_groups g
		JOIN ferry.group_partitions gp ON gp.group_id = g.id
		JOIN ferry.topic_partitions tp ON tp.topic_id = g.topic_id AND tp.partition = gp.partition
		UNION ALL
		SELECT g.topic_id, g.name, -1, (SELECT count(*) FROM ferry.group_members m WHERE m.group_id = g.id)
		FROM ferry.consumer_groups g
		ORDER BY 1, 2, 3`)
	if err != nil {
		return nil, interpretError("group lags", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ConsumerGroupLag, error) {
		var l ConsumerGroupLag
		return l, row.Scan(&l.TopicID, &l.Group, &l.Partition, &l.Lag)
	})
	return out, interpretError("group lags", err)
}
