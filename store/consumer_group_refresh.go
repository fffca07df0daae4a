package store

import (
	"context"
	"errors"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ConsumerGroupRefresh is what a poll or describe changed in passing: a rebalance,
// evictions of members whose session timed out, events skipped because
// retention removed them before the group read them.
type ConsumerGroupRefresh struct {
	// Created: the group did not exist, and this poll created it.
	Created    bool
	Rebalanced bool
	Evicted    int
	Skipped    int64
}

// consumerGroupState is a group as consumerGroupRefresh left it.
type consumerGroupState struct {
	id, generation int64
	ConsumerGroupRefresh
	members []string
	parts   []partState
}

// partState is one partition of a group.
type partState struct {
	partition        int
	owner            *string
	fetch, committed int64
}

// consumerGroupRefresh locks the group's row (membership changes of a group run
// one at a time), marks consumer as seen (unless ""), evicts members whose
// session timed out, moves positions that fell behind the retained log,
// and rebalances if the assignment is not what the live members should
// have — in one round trip when nothing changes. With create, a group
// that does not exist is created positioned there; without, it is
// ErrNoRows. See consumerGroupRefresher for its phases.
func consumerGroupRefresh(ctx context.Context, tx pgx.Tx, t Topic, name, consumer string, session int, create *StartPosition) (consumerGroupState, error) {
	r := &consumerGroupRefresher{tx: tx, topic: t, name: name, consumer: consumer, session: session}
	return r.run(ctx, create)
}

// consumerGroupRefresher is one refresh of a group inside a transaction: the
// group (by topic and name), the member that polls ("" for a describe or
// a leave) and its session timeout in seconds. Its phases, in order:
//
//   - read sends one round trip: lock queues the group's row lock,
//     markSeen the member's last_seen, evict the members whose session
//     timed out, readMembers the live ones, retention moves positions
//     behind the retained log, readPartitions the positions and owners;
//   - run creates a group that is not there, or grow adds partitions the
//     topic gained (each then reads again);
//   - consumerGroupRebalance moves partitions when the assignment is not what the
//     live members should have.
//
// Each queued statement reads its own result (pgx's QueuedQuery
// callbacks), so results are read by statement, never by position.
type consumerGroupRefresher struct {
	tx       pgx.Tx
	topic    Topic
	name     string
	consumer string
	session  int
}

// groupByName is the group's id, by topic ($1) and name ($2), for the
// statements of a refresh that are queued before its lock has read it.
const groupByName = `(SELECT id FROM ferry.consumer_groups WHERE topic_id = $1 AND name = $2)`

// run reads the group and brings it up to date; with create, a group that
// does not exist is created first.
func (r *consumerGroupRefresher) run(ctx context.Context, create *StartPosition) (consumerGroupState, error) {
	st, err := r.read(ctx)
	if err != nil {
		return st, err
	}
	if st.id < 0 {
		if create == nil {
			return st, pgx.ErrNoRows
		}
		created, err := consumerGroupCreate(ctx, r.tx, r.topic, r.name, *create)
		if err != nil {
			return st, err
		}
		st, err := r.run(ctx, nil)
		st.Created = created
		return st, err
	}
	if len(st.parts) < r.topic.Partitions {
		grew, err := r.grow(ctx, st.id)
		if err != nil {
			return st, err
		}
		if grew {
			return r.run(ctx, nil)
		}
	}
	return st, consumerGroupRebalance(ctx, r.tx, &st)
}

// read sends the refresh's one round trip and returns what it read; the
// id is -1 when the group does not exist.
func (r *consumerGroupRefresher) read(ctx context.Context) (consumerGroupState, error) {
	st := consumerGroupState{id: -1}
	b := &pgx.Batch{}
	if r.consumer != "" {
		// A poll that changes no assignment writes only what may be lost
		// in a crash (last_seen, evictions that the next poll redoes,
		// retention moves it recomputes): its commit need not wait for
		// the WAL flush. A rebalance or a creation turns this back on.
		b.Queue(asyncCommit)
	} else {
		b.Queue(groupPlanner)
	}
	r.lock(b, &st)
	r.markSeen(b)
	r.evict(b, &st)
	r.readMembers(b, &st)
	r.retention(b, &st)
	r.readPartitions(b, &st)
	return st, r.tx.SendBatch(ctx, b).Close()
}

// lock queues the group row's lock, which reads its id and generation
// (none: the id stays -1).
func (r *consumerGroupRefresher) lock(b *pgx.Batch, st *consumerGroupState) {
	b.Queue(`/* ferry:consumer_group_lock_generation */ SELECT id, generation FROM ferry.consumer_groups WHERE topic_id = $1 AND name = $2 FOR UPDATE`,
		r.topic.ID, r.name).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&st.id, &st.generation)
		if errors.Is(err, pgx.ErrNoRows) {
			st.id = -1
			return nil
		}
		return err
	})
}

// markSeen queues the member's join or last_seen (nothing without a
// consumer): last_seen is written at most once every memberSeenEvery, so
// a member's row gets a new version about once a second however often
// it polls (behind a held snapshot, every version is read by the next
// refresh).
func (r *consumerGroupRefresher) markSeen(b *pgx.Batch) {
	if r.consumer == "" {
		return
	}
	b.Queue(`/* ferry:consumer_group_member_seen */
			INSERT INTO ferry.group_members (group_id, consumer, session_timeout_seconds)
			SELECT `+groupByName+`, $3, $4 WHERE `+groupByName+` IS NOT NULL
			ON CONFLICT (group_id, consumer) DO UPDATE
				SET last_seen = now(), session_timeout_seconds = excluded.session_timeout_seconds
				WHERE group_members.last_seen < now() - `+memberSeenEvery+`
					OR group_members.session_timeout_seconds <> excluded.session_timeout_seconds`,
		r.topic.ID, r.name, r.consumer, r.session)
}

// evict queues the removal of members whose session timed out, and counts
// them. A member's last_seen may be memberSeenEvery older than its last
// poll: the session is given that much more.
func (r *consumerGroupRefresher) evict(b *pgx.Batch, st *consumerGroupState) {
	b.Queue(`/* ferry:consumer_group_members_evict */
		DELETE FROM ferry.group_members
		WHERE group_id = `+groupByName+` AND last_seen < now() - session_timeout_seconds * interval '1 second' - `+memberSeenEvery+``,
		r.topic.ID, r.name).Exec(func(tag pgconn.CommandTag) error {
		st.Evicted = int(tag.RowsAffected())
		return nil
	})
}

// readMembers queues the read of the live members, in order.
func (r *consumerGroupRefresher) readMembers(b *pgx.Batch, st *consumerGroupState) {
	b.Queue(`/* ferry:consumer_group_members_read */ SELECT consumer FROM ferry.group_members WHERE group_id = `+groupByName+` ORDER BY consumer`,
		r.topic.ID, r.name).Query(func(rows pgx.Rows) error {
		var err error
		st.members, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
}

// retention queues the move of every position behind the oldest retained
// event to it, and counts the events it never read.
func (r *consumerGroupRefresher) retention(b *pgx.Batch, st *consumerGroupState) {
	b.Queue(`/* ferry:consumer_group_retention */
		WITH oldest AS (
			SELECT tp.partition, coalesce((SELECT e."offset" FROM ferry.events e
				WHERE e.topic_id = tp.topic_id AND e.partition = tp.partition ORDER BY e."offset" LIMIT 1), `+partitionNextSQL("tp")+`) AS o
			FROM ferry.topic_partitions tp WHERE tp.topic_id = $1
		),
		behind AS (
			SELECT gp.partition, gp.expired_skipped AS before, o.o
			FROM ferry.group_partitions gp JOIN oldest o USING (partition)
			WHERE gp.group_id = `+groupByName+` AND `+groupCommittedSQL("gp")+` < o.o - 1
		),
		-- A commit may land between the read above and the row lock: the
		-- condition is checked again on the row as locked. A commit that
		-- locked the row before this statement began is counted as
		-- skipped (this statement's snapshot does not see its position);
		-- expired_skipped changes only under the group lock.
		moved AS (
			UPDATE ferry.group_partitions gp SET
				expired_skipped = gp.expired_skipped + (b.o - 1 - `+groupCommittedSQL("gp")+`),
				committed_offset = b.o - 1,
				fetch_offset = greatest(`+groupFetchSQL("gp")+`, b.o)
			FROM behind b
			WHERE gp.group_id = `+groupByName+` AND gp.partition = b.partition AND `+groupCommittedSQL("gp")+` < b.o - 1
			RETURNING gp.expired_skipped - b.before AS skipped
		)
		SELECT coalesce(sum(skipped), 0)::bigint FROM moved`, r.topic.ID, r.name).QueryRow(func(row pgx.Row) error {
		return row.Scan(&st.Skipped)
	})
}

// readPartitions queues the read of the group's partitions: owner and
// positions, in partition order.
func (r *consumerGroupRefresher) readPartitions(b *pgx.Batch, st *consumerGroupState) {
	b.Queue(`/* ferry:consumer_group_partitions_read */
		SELECT gp.partition, gp.owner, `+groupFetchSQL("gp")+`, `+groupCommittedSQL("gp")+` FROM ferry.group_partitions gp
		WHERE gp.group_id = `+groupByName+` ORDER BY gp.partition`, r.topic.ID, r.name).Query(func(rows pgx.Rows) error {
		var err error
		st.parts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (partState, error) {
			var ps partState
			return ps, row.Scan(&ps.partition, &ps.owner, &ps.fetch, &ps.committed)
		})
		return err
	})
}

// grow adds the partitions the topic gained since the group was created
// (read from their start), and reports whether there were any.
func (r *consumerGroupRefresher) grow(ctx context.Context, gid int64) (bool, error) {
	tag, err := r.tx.Exec(ctx, `/* ferry:consumer_group_partitions_grow */
			INSERT INTO ferry.group_partitions (group_id, partition, committed_offset, fetch_offset)
			SELECT $1, partition, -1, 0 FROM ferry.topic_partitions WHERE topic_id = $2
			ON CONFLICT DO NOTHING`, gid, r.topic.ID)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// consumerGroupCreate creates the group with a row per partition positioned at
// start (before the first event to read); created is false when another
// poll created it first (or the topic is gone).
func consumerGroupCreate(ctx context.Context, tx pgx.Tx, t Topic, name string, start StartPosition) (created bool, err error) {
	if _, err := tx.Exec(ctx, syncCommit); err != nil {
		return false, err
	}
	// The topic's row in key-share mode: a topic delete (which locks it
	// for update) waits for this creation, and then deletes the group;
	// or it went first, and the group is not created.
	var id int64
	err = tx.QueryRow(ctx, `/* ferry:consumer_group_create */
		INSERT INTO ferry.consumer_groups (topic_id, name)
		SELECT id, $2 FROM ferry.topics WHERE id = $1 FOR KEY SHARE
		ON CONFLICT (topic_id, name) DO NOTHING RETURNING id`, t.ID, name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		// Created meanwhile by another poll (which also positioned it),
		// or the topic is gone: either way the caller reads it again.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, err = tx.Exec(ctx, `/* ferry:consumer_group_partitions_create */
		INSERT INTO ferry.group_partitions (group_id, partition, committed_offset, fetch_offset)
		SELECT $1, tp.partition, c.committed, c.committed + 1
		FROM ferry.topic_partitions tp
		CROSS JOIN LATERAL (
			SELECT CASE
				WHEN $3 THEN coalesce((SELECT "offset" FROM ferry.events WHERE topic_id = $2 AND partition = tp.partition ORDER BY "offset" LIMIT 1), `+partitionNextSQL("tp")+`) - 1
				WHEN $4::timestamptz IS NOT NULL THEN coalesce(
					(SELECT "offset" FROM ferry.events WHERE topic_id = $2 AND partition = tp.partition AND published_at >= $4
					 ORDER BY published_at, "offset" LIMIT 1), `+partitionNextSQL("tp")+`) - 1
				ELSE `+partitionNextSQL("tp")+` - 1
				END AS committed
		) c
		WHERE tp.topic_id = $2
		ON CONFLICT DO NOTHING`, id, t.ID, start.Earliest, start.Time)
	return err == nil, err
}

// consumerGroupRebalance gives every partition the owner assignSticky says, if
// that changes anything: the generation grows, and each partition that
// moved starts, for its new owner, after the committed offset.
func consumerGroupRebalance(ctx context.Context, tx pgx.Tx, st *consumerGroupState) error {
	current := map[int]string{}
	parts := make([]int, len(st.parts))
	for i, ps := range st.parts {
		parts[i] = ps.partition
		if ps.owner != nil {
			current[ps.partition] = *ps.owner
		}
	}
	want := assignSticky(parts, current, st.members)
	var (
		moved  []int32
		owners []*string
	)
	index := map[int]int{}
	for i, ps := range st.parts {
		if want[ps.partition] == current[ps.partition] {
			continue
		}
		moved = append(moved, int32(ps.partition))
		var o *string
		if w := want[ps.partition]; w != "" {
			o = &w
		}
		owners = append(owners, o)
		st.parts[i].owner = o
		index[ps.partition] = i
	}
	if len(moved) == 0 {
		return nil
	}
	st.Rebalanced = true
	b := &pgx.Batch{}
	b.Queue(syncCommit) // a generation must never be handed out twice
	b.Queue(`/* ferry:consumer_group_generation_bump */ UPDATE ferry.consumer_groups SET generation = generation + 1 WHERE id = $1 RETURNING generation`, st.id)
	// The moved rows are locked first, so the update (a statement of its
	// own, with a snapshot taken after the locks) sees every commit of the
	// old owner: a commit holds its rows in share mode until it ends, and
	// its position is a row the update reads, not the row it locks.
	b.Queue(`/* ferry:consumer_group_rebalance_lock */
		SELECT count(*) FROM (SELECT 1 FROM ferry.group_partitions WHERE group_id = $1 AND partition = ANY($2) ORDER BY partition FOR UPDATE) l`,
		st.id, moved)
	b.Queue(`/* ferry:consumer_group_rebalance */
		WITH `+groupEpochEndSQL(`gp.partition = ANY($2)`)+`
		UPDATE ferry.group_partitions gp SET owner = m.owner, owner_generation = g.generation,
			committed_offset = greatest(gp.committed_offset, n.committed), fetch_offset = greatest(gp.committed_offset, n.committed) + 1
		FROM unnest($2::int[], $3::text[]) AS m(partition, owner), ferry.consumer_groups g, ended n
		WHERE gp.group_id = $1 AND gp.partition = m.partition AND g.id = $1 AND n.partition = m.partition
		RETURNING gp.partition, gp.fetch_offset, gp.committed_offset`, st.id, moved, owners)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return err
	}
	if err := br.QueryRow().Scan(&st.generation); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	// The positions as set under the row locks: a commit of the old owner
	// may have landed since the batch that read them.
	rows, err := br.Query()
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			p                int
			fetch, committed int64
		)
		if err := rows.Scan(&p, &fetch, &committed); err != nil {
			rows.Close()
			return err
		}
		if i, ok := index[p]; ok {
			st.parts[i].fetch, st.parts[i].committed = fetch, committed
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return br.Close()
}

// assignSticky spreads partitions evenly over members (sorted), keeping
// each partition with its current owner where the owner is live and under
// its share, and returns the owner of every partition ("" when there are
// no members). Members that already hold more get the larger shares, so
// as few partitions as possible move.
func assignSticky(parts []int, current map[int]string, members []string) map[int]string {
	out := make(map[int]string, len(parts))
	if len(members) == 0 {
		for _, p := range parts {
			out[p] = ""
		}
		return out
	}
	live := make(map[string]bool, len(members))
	kept := map[string][]int{}
	for _, m := range members {
		live[m] = true
	}
	var free []int
	for _, p := range parts {
		if o, ok := current[p]; ok && live[o] {
			kept[o] = append(kept[o], p)
		} else {
			free = append(free, p)
		}
	}
	order := slices.Clone(members)
	sort.SliceStable(order, func(i, j int) bool { return len(kept[order[i]]) > len(kept[order[j]]) })
	base, extra := len(parts)/len(members), len(parts)%len(members)
	quota := map[string]int{}
	for i, m := range order {
		quota[m] = base
		if i < extra {
			quota[m]++
		}
		ps := kept[m]
		if len(ps) > quota[m] {
			free = append(free, ps[quota[m]:]...)
			ps = ps[:quota[m]]
		}
		for _, p := range ps {
			out[p] = m
		}
		quota[m] -= len(ps)
	}
	slices.Sort(free)
	for _, m := range members {
		for ; quota[m] > 0 && len(free) > 0; quota[m]-- {
			out[free[0]] = m
			free = free[1:]
		}
	}
	return out
}

// memberSeenEvery is how often, at most, a member's last_seen is written
// (an SQL interval); memberSeenSQL writes it, for member $2 of group $1.
const (
	memberSeenEvery = `interval '1 second'`
	memberSeenSQL   = `UPDATE ferry.group_members SET last_seen = now() WHERE group_id = $1 AND consumer = $2 AND last_seen < now() - ` + memberSeenEvery
)

// asyncCommit and syncCommit set, for the rest of the transaction,
// whether its commit waits for the WAL flush. asyncCommit, and groupPlanner
// where a transaction has no asyncCommit, also turn sequential scans off
// for the rest of the transaction (groupPlannerSQL).
const (
	asyncCommit  = `/* ferry:consumer_group_commit_async */ SELECT set_config('synchronous_commit', 'off', true), ` + groupPlannerSQL
	syncCommit   = `/* ferry:consumer_group_commit_sync */ SELECT set_config('synchronous_commit', 'on', true)`
	groupPlanner = `/* ferry:consumer_group_planner */ SELECT ` + groupPlannerSQL
)

// groupPlannerSQL turns sequential and bitmap scans off for the rest of
// the transaction: every statement of a group reads by key, and the
// newest position must be read from the top of its key (an index scan
// backward). A plan made while ferry.group_fetches or group_commits was
// small (a generic plan kept by a pooled connection) would read them
// whole per partition once they are not (many groups), and a bitmap scan
// reads every row of the epoch, the dead ones a held snapshot keeps
// included (the 10-minute held bench: 636 buffers per poll's read, against
// 13 by the index).
const groupPlannerSQL = `set_config('enable_seqscan', 'off', true) || set_config('enable_bitmapscan', 'off', true)`
