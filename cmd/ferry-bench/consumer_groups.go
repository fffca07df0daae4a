package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scenario 10: consumer groups. Part 1 reads a pre-filled topic through a
// group (one member, then four) against the same range reads in raw SQL;
// part 2 measures publish → poll latency of a long-polling member at a
// fixed publish rate; part 3 measures how long a group takes to give a
// silent member's partitions to the member that is left.

const (
	// groupBatch is part 1's max_events per poll, the raw side's LIMIT
	// and the fill's events per transaction.
	groupBatch = 1000
	// groupSession is the session_timeout_seconds of parts 1 and 2.
	groupSession = 30
	// groupRate is part 2's publish rate (events/s) and groupWait its
	// long poll's wait_seconds.
	groupRate, groupWait = 100, 10
	// rebalanceSession and rebalanceWait are part 3's
	// session_timeout_seconds and wait_seconds.
	rebalanceSession, rebalanceWait = 5, 1
)

// groupSizes are the events part 1 reads and part 2's publishing time.
func (b *Bench) groupSizes() (events int, publishFor time.Duration) {
	if b.opts.Quick {
		return 40_000, 3 * time.Second
	}
	return 200_000, 10 * time.Second
}

// The raw side of part 1: what a hand-written reader of a partition does
// per batch — a range read by primary key, then an update of its position
// row (a ferry.group_partitions row of a group the bench inserts, so the
// table, fillfactor and HOT behaviour are Ferry's).
const (
	rawGroupRead = `/* raw:group_read */
		SELECT id, type, key, data::text, attributes::text, partition, "offset", published_at
		FROM ferry.events
		WHERE topic_id = $1 AND partition = $2 AND "offset" >= $3
		ORDER BY "offset" LIMIT $4`
	rawGroupCommit = `/* raw:group_commit */
		UPDATE ferry.group_partitions SET committed_offset = $3::bigint, fetch_offset = $3::bigint + 1
		WHERE group_id = $1 AND partition = $2`
)

// lastOffsets is what a member commits after processing events: per
// partition, the highest offset among them.
func lastOffsets(events []groupEvent) map[int]int64 {
	out := map[int]int64{}
	for _, e := range events {
		if o, ok := out[e.Partition]; !ok || e.Offset > o {
			out[e.Partition] = e.Offset
		}
	}
	return out
}

// memberName is the consumer id of a group's m-th member.
func memberName(m int) string { return fmt.Sprintf("member-%d", m) }

// joinGroup makes members members join a new group (start earliest) one
// after another, each with a poll of max_events 1 that it commits, so that
// the assignment is settled (one rebalance per join) before a measured
// run. It returns the events the joins read.
func joinGroup(ctx context.Context, c *FerryClient, topic, group string, members int) (int64, error) {
	var joined int64
	for m := range members {
		r, err := c.GroupPoll(ctx, topic, group, groupPollRequest{
			Consumer: memberName(m), MaxEvents: 1, SessionTimeoutSeconds: groupSession, Start: "earliest"})
		if err != nil {
			return 0, fmt.Errorf("join: %w", err)
		}
		if len(r.Events) > 0 {
			if err := c.GroupCommit(ctx, topic, group, memberName(m), r.Generation, lastOffsets(r.Events)); err != nil {
				return 0, fmt.Errorf("join commit: %w", err)
			}
		}
		joined += int64(len(r.Events))
	}
	return joined, nil
}

// fillGroupTopic fills the topic with n events through the raw pool with
// scenario 8's raw batch publish (batches of 1000 in one transaction each,
// 4 writers: dense offsets), checks the offsets, then VACUUM ANALYZE and a
// checkpoint. It returns the events per partition.
func (b *Bench) fillGroupTopic(ctx context.Context, topicID int64, n int) ([]int64, error) {
	started := time.Now()
	keys := eventKeys()
	data := bodies(groupBatch)
	var next atomic.Int64
	err := runCounted(ctx, "groups/fill", 4, int64(n/groupBatch), func(ctx context.Context) error {
		i := next.Add(1) - 1
		batch := make([]string, groupBatch)
		for j := range batch {
			batch[j] = keys[(i*groupBatch+int64(j))%int64(len(keys))]
		}
		return rawPublishBatch(ctx, b, topicID, batch, data)
	})
	if err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	if _, err := b.checkDensity(ctx, "fill", topicID); err != nil {
		return nil, err
	}
	rows, err := b.raw.Query(ctx, `SELECT next_offset FROM ferry.topic_partitions WHERE topic_id = $1 ORDER BY partition`, topicID)
	if err != nil {
		return nil, err
	}
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	if _, err := b.raw.Exec(ctx, `VACUUM ANALYZE ferry.events`); err != nil {
		return nil, fmt.Errorf("vacuum: %w", err)
	}
	if err := b.checkpoint(ctx); err != nil {
		return nil, err
	}
	progress("  filled %s events in %s (per partition %v)", fmtInt(int64(n)), time.Since(started).Round(100*time.Millisecond), sizes)
	return sizes, nil
}

func (b *Bench) groups(ctx context.Context) (*Section, error) {
	n, publishFor := b.groupSizes()
	stop, err := b.trackStatements(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	const readTopic = "bench-groups-read"
	topics := []string{readTopic, "bench-groups-latency", "bench-groups-rebalance"}
	defer func() {
		// Empty tables first: the topics' cleanup jobs then find nothing.
		cctx := context.WithoutCancel(ctx)
		if _, err := b.raw.Exec(cctx, `TRUNCATE ferry.events, ferry.event_dedup`); err != nil {
			progress("  truncate: %v", err)
		}
		for _, t := range topics {
			if err := b.deleteTopic(cctx, t); err != nil && !strings.Contains(err.Error(), "status 404") {
				progress("  delete topic %s: %v", t, err)
			}
		}
	}()
	if err := b.resetTopics(ctx); err != nil {
		return nil, err
	}
	tid, err := b.createTopic(ctx, readTopic)
	if err != nil {
		return nil, err
	}
	if err := warmPool(ctx, b.raw, topicPartitions); err != nil {
		return nil, err
	}
	progress("  filling %s events, batches of %d", fmtInt(int64(n)), groupBatch)
	sizes, err := b.fillGroupTopic(ctx, tid, n)
	if err != nil {
		return nil, err
	}

	// Part 1, in the order raw 1, Ferry 1, Ferry 4, raw 4.
	progress("  read everything: 1 reader, then 4")
	raw1, err := b.rawGroupRead(ctx, tid, "raw-1", 1)
	if err != nil {
		return nil, err
	}
	ferry1, err := b.ferryGroupRead(ctx, readTopic, "ferry-1", 1, int64(n))
	if err != nil {
		return nil, err
	}
	ferry4, err := b.ferryGroupRead(ctx, readTopic, "ferry-4", 4, int64(n))
	if err != nil {
		return nil, err
	}
	raw4, err := b.rawGroupRead(ctx, tid, "raw-4", 4)
	if err != nil {
		return nil, err
	}
	if raw1.events != int64(n) || raw4.events != int64(n) {
		return nil, fmt.Errorf("raw readers read %d and %d events, not %d", raw1.events, raw4.events, n)
	}
	// The read topic's 200k events stay out of parts 2 and 3.
	if _, err := b.raw.Exec(ctx, `TRUNCATE ferry.events, ferry.event_dedup`); err != nil {
		return nil, err
	}
	if err := b.checkpoint(ctx); err != nil {
		return nil, err
	}

	progress("  publish → poll latency: one long-polling member, %d events/s for %s", groupRate, publishFor)
	lat, err := b.measureGroupLatency(ctx, publishFor)
	if err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}

	progress("  rebalance after a member stops (session timeout %d s, wait %d s)", rebalanceSession, rebalanceWait)
	reb, err := b.measureRebalance(ctx)
	if err != nil {
		return nil, fmt.Errorf("rebalance: %w", err)
	}

	return groupsSection(raw1, ferry1, raw4, ferry4, lat, reb, sizes, n, publishFor, b.statementsReason), nil
}
