package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Behind a held snapshot (a report, an idle transaction), a group that
// polls and commits hundreds of times writes no new version of its
// partitions' rows and about one of its member's a second: every poll
// reads those rows, and versions kept for the snapshot would be read by
// every poll after them. Its positions are rows it inserts, of which one
// per partition is live; the group still reads and commits exactly.
func TestGroupPositionsBehindAHeldSnapshot(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "held", 2)
	e.gpoll(tp, "g", "a", 1) // creates the group; nothing published yet
	held, err := e.pool.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = held.Rollback(context.Background()) }()
	require.Equal(t, int64(1), countIn(t, held, `SELECT count(*) FROM ferry.group_members`), "the snapshot is taken")

	const cycles = 300
	e.publishTo(tp, 0, cycles)
	e.publishTo(tp, 1, cycles)
	var got int
	for range cycles {
		r := e.gpoll(tp, "g", "a", 2)
		require.NotEmpty(t, r.Events)
		got += len(r.Events)
		require.NoError(t, e.gcommit(tp, "g", "a", r.Generation, lastByPartition(r.Events)))
	}
	require.Equal(t, 2*cycles, got, "every event once")
	require.Equal(t, []int64{cycles - 1, cycles - 1}, e.committedOffsets(tp, "g"))
	require.Empty(t, e.gpoll(tp, "g", "a", 10).Events, "the fetch positions are at the heads")

	page := e.count(`SELECT current_setting('block_size')::bigint`)
	require.Equal(t, page, e.count(`SELECT pg_relation_size('ferry.group_partitions')`), "group_partitions got no new row versions")
	require.Equal(t, page, e.count(`SELECT pg_relation_size('ferry.group_members')`), "group_members got a version a second at most")
	require.Equal(t, int64(2), e.count(`SELECT count(*) FROM ferry.group_fetches`), "one live fetch row per partition")
	require.Equal(t, int64(2), e.count(`SELECT count(*) FROM ferry.group_commits`), "one live commit row per partition")
}

// A rebalance that moves a partition while its old owner's commit is in
// flight starts the new owner after that commit: the commit holds the
// partition's row in share mode and its position is a row of its own, so
// the rebalance locks the rows before it reads the positions.
func TestGroupRebalanceAfterACommitInFlight(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "race", 2)
	e.publishTo(tp, 0, 3)
	e.publishTo(tp, 1, 3)
	a := e.gpoll(tp, "g", "a", 100)
	require.Len(t, a.Events, 6)

	pool, h, release := e.heldPoolAt(&holdTracer{match: "commit", exact: true})
	committed := make(chan error, 1)
	go func() {
		committed <- store.ConsumerGroupCommit(e.ctx, pool, store.ConsumerGroupCommitParams{
			Topic: tp, Group: "g", Consumer: "a", Generation: a.Generation, Offsets: map[int]int64{0: 2, 1: 2},
		})
	}()
	<-h.arrived // the commit's statement ran; its transaction is open

	joined := make(chan store.ConsumerGroupPollResult, 1)
	b := e.newNamedPool(2, "joiner")
	go func() {
		res, err := store.ConsumerGroupPoll(e.ctx, b, nil, store.ConsumerGroupPollParams{
			Topic: tp, Group: "g", Consumer: "b", SessionTimeout: groupSession, Max: 100,
		})
		assertNoErr(t, err, "b's poll")
		joined <- res
	}()
	e.activityWaitingEventually("joiner") // the rebalance waits for the commit
	release()
	require.NoError(t, <-committed)
	res := <-joined
	require.Len(t, res.Partitions, 1, "b got a partition")
	require.Empty(t, res.Events, "b starts after a's commit")
	require.Equal(t, []int64{2, 2}, e.committedOffsets(tp, "g"))
}

// A seek starts a new epoch of every partition it moves: the greater
// positions written before it count no more, and the rows of the old
// epoch are deleted.
func TestGroupSeekBackPastLoggedPositions(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "seek", 2)
	e.publishTo(tp, 0, 3)
	e.publishTo(tp, 1, 3)
	a := e.gpoll(tp, "g", "a", 100)
	require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 2, 1: 2}))
	require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Start: store.StartPosition{Earliest: true}}))
	require.Equal(t, []int64{-1, -1}, e.committedOffsets(tp, "g"), "sought back")
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.group_fetches`)+e.count(`SELECT count(*) FROM ferry.group_commits`), "the old epoch's rows are gone")
	require.Len(t, e.gpoll(tp, "g", "a", 100).Events, 6, "read again from the start")
}

// countIn reads a count in tx.
func countIn(t *testing.T, tx pgx.Tx, sql string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, tx.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

// lastByPartition is the highest offset of each partition among evs.
func lastByPartition(evs []store.Event) map[int]int64 {
	out := map[int]int64{}
	for _, ev := range evs {
		out[ev.Partition] = max(out[ev.Partition], ev.Offset)
	}
	return out
}
