package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// ConsumerGroupLeaveParams is a member leaving its group.
type ConsumerGroupLeaveParams struct {
	Topic    Topic
	Group    string
	Consumer string
}

// ConsumerGroupLeaveResult is what a leave did.
type ConsumerGroupLeaveResult struct {
	// Left is whether the consumer was a member (false: a retried leave,
	// one after its session timed out, or a name never seen).
	Left bool
	// ConsumerGroupRefresh is what the refresh that followed changed: the
	// rebalance that gave the leaver's partitions away, and evictions of
	// other members whose session timed out meanwhile.
	ConsumerGroupRefresh
}

// ConsumerGroupLeave removes the consumer from the group at once (a graceful
// shutdown) instead of waiting for its session to time out: under the
// group row's lock it deletes the member and refreshes the group as a poll
// does, so the leaver's partitions are assigned to the remaining members
// (or to nobody) in the same transaction, the generation is bumped, and
// each moved partition's fetch position is committed + 1: its uncommitted
// events are read again by its next owner. The leaver's later commits and
// fetches are fenced (it owns nothing); a later poll of the same name
// joins as a new member. The remaining members learn their new partitions
// at their next poll; long polls waiting in any instance are woken
// (through n, if not nil) and end early, so that poll comes at once.
//
// A consumer that is not a member is no error and changes nothing of its
// own: a leave is idempotent. A group that does not exist is [ErrNotFound].
func ConsumerGroupLeave(ctx context.Context, db TxBeginner, n *Notifier, p ConsumerGroupLeaveParams) (ConsumerGroupLeaveResult, error) {
	var res ConsumerGroupLeaveResult
	err := retry(ctx, func() error {
		res = ConsumerGroupLeaveResult{}
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			// The group's lock first, as every membership change takes it.
			var gid int64
			if err := tx.QueryRow(ctx, `/* ferry:consumer_group_lock */ SELECT id FROM ferry.consumer_groups WHERE topic_id = $1 AND name = $2 FOR UPDATE`,
				p.Topic.ID, p.Group).Scan(&gid); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `/* ferry:consumer_group_member_leave */ DELETE FROM ferry.group_members WHERE group_id = $1 AND consumer = $2`,
				gid, p.Consumer)
			if err != nil {
				return err
			}
			res.Left = tag.RowsAffected() > 0
			st, err := consumerGroupRefresh(ctx, tx, p.Topic, p.Group, "", 0, nil)
			res.ConsumerGroupRefresh = st.ConsumerGroupRefresh
			return err
		})
	})
	if err != nil {
		return res, interpretError("group leave", err)
	}
	if res.Rebalanced && n != nil {
		n.Published([]int64{TopicWakeKey(p.Topic.ID)})
	}
	return res, nil
}
