package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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

// ConsumerGroupPollParams is a poll of one member.
type ConsumerGroupPollParams struct {
	Topic          Topic
	Group          string
	Consumer       string
	SessionTimeout time.Duration
	// Start positions a group created by this poll.
	Start StartPosition
	Max   int
	// Wait, when the member's partitions have nothing new, long-polls.
	Wait         time.Duration
	FallbackPoll time.Duration
	Stop         <-chan struct{}
	// Recheck, when set, is called before every fetch after the first
	// (after each wait): its error ends the long poll with it, nothing fetched.
	// The handlers re-check the request's key with it.
	Recheck func(context.Context) error
}

// ConsumerGroupPollResult is what a poll returns.
type ConsumerGroupPollResult struct {
	Generation int64
	Partitions []int
	Events     []Event
	ConsumerGroupRefresh
}

// owned is a partition a member owns, and its fetch position.
type owned struct {
	partition int
	fetch     int64
}

// ConsumerGroupPoll joins the member to the group (creating the group on first
// use), rebalances if membership changed, and returns up to Max events of
// the member's partitions from their fetch positions, advancing them.
func ConsumerGroupPoll(ctx context.Context, pool *pgxpool.Pool, n *Notifier, p ConsumerGroupPollParams) (ConsumerGroupPollResult, error) {
	var (
		res  ConsumerGroupPollResult
		st   consumerGroupState
		mine []owned
	)
	start := p.Start
	err := retry(ctx, func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			st, err = consumerGroupRefresh(ctx, tx, p.Topic, p.Group, p.Consumer, int(p.SessionTimeout/time.Second), &start)
			return err
		})
	})
	if err != nil {
		return res, interpretError("group poll", err)
	}
	res.Generation, res.ConsumerGroupRefresh = st.generation, st.ConsumerGroupRefresh
	res.Partitions = []int{}
	for _, ps := range st.parts {
		if ps.owner != nil && *ps.owner == p.Consumer {
			mine = append(mine, owned{partition: ps.partition, fetch: ps.fetch})
			res.Partitions = append(res.Partitions, ps.partition)
		}
	}
	if len(mine) == 0 {
		// More members than partitions: nothing to read until a
		// rebalance, which the next poll does. Wait as a long poll would,
		// so idle members do not spin, but end the wait when the
		// assignment changes (e.g. a member left), so that next poll
		// comes at once.
		if p.Wait <= 0 {
			return res, nil
		}
		if n == nil {
			t := time.NewTimer(p.Wait)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			case <-p.Stop:
			}
			return res, nil
		}
		err = longPoll(ctx, n, TopicWakeKey(p.Topic.ID), p.Wait, p.FallbackPoll, p.Stop, rechecked(ctx, p.Recheck, func() (bool, error) {
			return consumerGroupGenerationMoved(ctx, pool, st.id, res.Generation)
		}))
		if err != nil && ctx.Err() == nil {
			return res, err
		}
		return res, nil
	}
	err = longPoll(ctx, n, TopicWakeKey(p.Topic.ID), p.Wait, p.FallbackPoll, p.Stop, rechecked(ctx, p.Recheck, func() (bool, error) {
		events, moved, err := consumerGroupFetch(ctx, pool, memberFetchParams{
			topicID: p.Topic.ID, group: st.id, consumer: p.Consumer, generation: res.Generation, mine: mine, max: p.Max,
		})
		res.Events = events
		// Stop waiting when something came, or the assignment changed
		// (partitions lost or gained: the next poll tells).
		return len(events) > 0 || moved, err
	}))
	return res, err
}

// consumerGroupGenerationMoved reports whether the group's generation is no longer
// gen (or the group is gone).
func consumerGroupGenerationMoved(ctx context.Context, db DBTX, gid, gen int64) (bool, error) {
	var now int64
	err := db.QueryRow(ctx, `/* ferry:consumer_group_generation_read */ SELECT generation FROM ferry.consumer_groups WHERE id = $1`, gid).Scan(&now)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	if err != nil {
		return false, interpretError("group poll", err)
	}
	return now != gen, nil
}

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
// consumer).
func (r *consumerGroupRefresher) markSeen(b *pgx.Batch) {
	if r.consumer == "" {
		return
	}
	b.Queue(`/* ferry:consumer_group_member_seen */
			INSERT INTO ferry.group_members (group_id, consumer, session_timeout_seconds)
			SELECT `+groupByName+`, $3, $4 WHERE `+groupByName+` IS NOT NULL
			ON CONFLICT (group_id, consumer) DO UPDATE
				SET last_seen = now(), session_timeout_seconds = excluded.session_timeout_seconds`,
		r.topic.ID, r.name, r.consumer, r.session)
}

// evict queues the removal of members whose session timed out, and counts
// them.
func (r *consumerGroupRefresher) evict(b *pgx.Batch, st *consumerGroupState) {
	b.Queue(`/* ferry:consumer_group_members_evict */
		DELETE FROM ferry.group_members
		WHERE group_id = `+groupByName+` AND last_seen < now() - session_timeout_seconds * interval '1 second'`,
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
				WHERE e.topic_id = tp.topic_id AND e.partition = tp.partition ORDER BY e."offset" LIMIT 1), tp.next_offset) AS o
			FROM ferry.topic_partitions tp WHERE tp.topic_id = $1
		),
		behind AS (
			SELECT gp.partition, gp.expired_skipped AS before, o.o
			FROM ferry.group_partitions gp JOIN oldest o USING (partition)
			WHERE gp.group_id = `+groupByName+` AND gp.committed_offset < o.o - 1
		),
		-- A commit may land between the read above and the row lock: the
		-- condition is checked again on the row as locked, and the count
		-- taken from it (expired_skipped changes only under the group lock).
		moved AS (
			UPDATE ferry.group_partitions gp SET
				expired_skipped = gp.expired_skipped + (b.o - 1 - gp.committed_offset),
				committed_offset = b.o - 1,
				fetch_offset = greatest(gp.fetch_offset, b.o)
			FROM behind b
			WHERE gp.group_id = `+groupByName+` AND gp.partition = b.partition AND gp.committed_offset < b.o - 1
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
		SELECT partition, owner, fetch_offset, committed_offset FROM ferry.group_partitions
		WHERE group_id = `+groupByName+` ORDER BY partition`, r.topic.ID, r.name).Query(func(rows pgx.Rows) error {
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
				WHEN $3 THEN coalesce((SELECT "offset" FROM ferry.events WHERE topic_id = $2 AND partition = tp.partition ORDER BY "offset" LIMIT 1), tp.next_offset) - 1
				WHEN $4::timestamptz IS NOT NULL THEN coalesce(
					(SELECT "offset" FROM ferry.events WHERE topic_id = $2 AND partition = tp.partition AND published_at >= $4
					 ORDER BY published_at, "offset" LIMIT 1), tp.next_offset) - 1
				ELSE tp.next_offset - 1
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
	b.Queue(`/* ferry:consumer_group_rebalance */
		UPDATE ferry.group_partitions gp SET owner = m.owner, owner_generation = g.generation,
			fetch_offset = gp.committed_offset + 1
		FROM unnest($2::int[], $3::text[]) AS m(partition, owner), ferry.consumer_groups g
		WHERE gp.group_id = $1 AND gp.partition = m.partition AND g.id = $1
		RETURNING gp.partition, gp.fetch_offset, gp.committed_offset`, st.id, moved, owners)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return err
	}
	if err := br.QueryRow().Scan(&st.generation); err != nil {
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

// memberFetchParams is one fetch of a member: the topic, the group, the
// member and the generation its poll's refresh saw, the partitions it
// owns with their fetch positions, and how many events at most.
type memberFetchParams struct {
	topicID, group int64
	consumer       string
	generation     int64
	mine           []owned
	max            int
}

// consumerGroupFetch reads up to max events of the member's partitions from their
// fetch positions (each in offset order; the max is shared out among the
// partitions that have events, so no partition starves and no more than
// max rows are read) and advances the positions — only of partitions the
// member still owns in generation gen; events of the others are dropped,
// and moved reports that some were. When there is nothing to read, moved
// reports whether the group's generation is no longer gen (a rebalance, a
// leave or a seek since the poll's refresh). It also marks the member as
// seen. See memberFetch for its phases.
func consumerGroupFetch(ctx context.Context, pool *pgxpool.Pool, p memberFetchParams) ([]Event, bool, error) {
	f := newMemberFetch(p)
	events, moved, err := f.run(ctx, pool)
	if err != nil {
		return nil, false, interpretError("group fetch", err)
	}
	return events, moved, nil
}

// memberFetch is one consumerGroupFetch. Its phases, in order (a round trip each):
//
//   - plan reads how many events each partition has after its position
//     (and whether the generation moved) and shares the max out;
//   - read reads the events;
//   - advance moves the positions past them, fenced, in a transaction of
//     its own, and reads which partitions the member still owns;
//   - keep drops the events of the partitions it no longer owns.
type memberFetch struct {
	memberFetchParams
	parts  []int32 // per partition owned: its number…
	froms  []int64 // …its fetch position…
	limits []int64 // …and how many events to read of it (plan)

	moved  bool    // from plan: the generation is no longer the poll's
	picked []Event // from read
	still  []int   // from advance: the partitions still owned
}

// newMemberFetch lays out the member's partitions and positions as the
// statements take them.
func newMemberFetch(p memberFetchParams) *memberFetch {
	f := &memberFetch{memberFetchParams: p, parts: make([]int32, len(p.mine)), froms: make([]int64, len(p.mine))}
	for i, o := range p.mine {
		f.parts[i], f.froms[i] = int32(o.partition), o.fetch
	}
	return f
}

// run runs the phases; with nothing to read it ends after plan.
func (f *memberFetch) run(ctx context.Context, db DBTX) ([]Event, bool, error) {
	total, err := f.plan(ctx, db)
	if err != nil || total == 0 {
		return nil, f.moved, err
	}
	if err := f.read(ctx, db); err != nil {
		return nil, false, err
	}
	if err := f.advance(ctx, db); err != nil {
		return nil, false, err
	}
	return f.keep(), len(f.still) < len(f.mine), nil
}

// plan reads how many events each partition has after the position, and
// the group's generation (no rows: the group is gone, which counts as
// moved), shares the max out among the partitions and returns the total
// to read.
func (f *memberFetch) plan(ctx context.Context, db DBTX) (int64, error) {
	rows, err := db.Query(ctx, `/* ferry:consumer_group_fetch_available */
		SELECT p.partition, greatest(0, tp.next_offset - p.from_offset), g.generation
		FROM ferry.consumer_groups g
		CROSS JOIN unnest($2::int[], $3::bigint[]) AS p(partition, from_offset)
		JOIN ferry.topic_partitions tp ON tp.topic_id = $1 AND tp.partition = p.partition
		WHERE g.id = $4`, f.topicID, f.parts, f.froms, f.group)
	if err != nil {
		return 0, err
	}
	avail := map[int32]int64{}
	f.moved = true // unless a row says the generation is still the poll's
	var (
		p      int32
		n, now int64
	)
	_, err = pgx.ForEachRow(rows, []any{&p, &n, &now}, func() error {
		avail[p], f.moved = n, now != f.generation
		return nil
	})
	if err != nil {
		return 0, err
	}
	f.limits = shareOut(f.parts, avail, f.max)
	total := int64(0)
	for _, l := range f.limits {
		total += l
	}
	return total, nil
}

// read reads the events plan shares out, in partition and offset order.
func (f *memberFetch) read(ctx context.Context, db DBTX) error {
	rows, err := db.Query(ctx, `/* ferry:consumer_group_fetch */
		SELECT e.id, e.type, e.key, e.data::text, e.attributes::text, e.partition, e."offset", e.published_at
		FROM unnest($2::int[], $3::bigint[], $4::bigint[]) AS p(partition, from_offset, lim)
		CROSS JOIN LATERAL (
			SELECT * FROM ferry.events
			WHERE topic_id = $1 AND partition = p.partition AND "offset" >= p.from_offset
			ORDER BY "offset" LIMIT p.lim
		) e
		WHERE p.lim > 0
		ORDER BY e.partition, e."offset"`, f.topicID, f.parts, f.froms, f.limits)
	if err != nil {
		return err
	}
	f.picked, err = pgx.CollectRows(rows, scanEvent)
	return err
}

// advance moves the fetch positions past the events read — fenced: only
// of partitions still owned, got in the poll's generation or before —
// marks the member as seen, and reads which partitions it still owns. A
// fetch position lost in a crash only means events are read again (at
// least once): the commit need not wait for the WAL flush.
func (f *memberFetch) advance(ctx context.Context, db DBTX) error {
	next := map[int]int64{}
	for _, e := range f.picked {
		next[e.Partition] = e.Offset + 1
	}
	advParts, advTo := []int32{}, []int64{} // never nil: NULL would match nothing
	for p, off := range next {
		advParts = append(advParts, int32(p))
		advTo = append(advTo, off)
	}
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(asyncCommit)
	b.Queue(`/* ferry:consumer_group_fetch_advance */
		WITH seen AS (
			UPDATE ferry.group_members SET last_seen = now() WHERE group_id = $1 AND consumer = $2
		),
		advanced AS (
			UPDATE ferry.group_partitions gp SET fetch_offset = greatest(gp.fetch_offset, a.next)
			FROM unnest($4::int[], $5::bigint[]) AS a(partition, next)
			WHERE gp.group_id = $1 AND gp.partition = a.partition AND gp.owner = $2 AND gp.owner_generation <= $3
			RETURNING gp.partition
		)
		SELECT partition FROM advanced
		UNION ALL
		SELECT partition FROM ferry.group_partitions
		WHERE group_id = $1 AND owner = $2 AND owner_generation <= $3 AND partition <> ALL($4)`,
		f.group, f.consumer, f.generation, advParts, advTo).Query(func(rows pgx.Rows) error {
		var err error
		f.still, err = pgx.CollectRows(rows, pgx.RowTo[int])
		return err
	})
	b.Queue(`COMMIT`)
	return db.SendBatch(ctx, b).Close()
}

// keep returns the events read of the partitions the member still owns.
func (f *memberFetch) keep() []Event {
	keep := map[int]bool{}
	for _, p := range f.still {
		keep[p] = true
	}
	out := f.picked[:0]
	for _, e := range f.picked {
		if keep[e.Partition] {
			out = append(out, e)
		}
	}
	return out
}

// asyncCommit and syncCommit set, for the rest of the transaction,
// whether its commit waits for the WAL flush.
const (
	asyncCommit = `/* ferry:consumer_group_commit_async */ SELECT set_config('synchronous_commit', 'off', true)`
	syncCommit  = `/* ferry:consumer_group_commit_sync */ SELECT set_config('synchronous_commit', 'on', true)`
)

// shareOut divides max among the partitions (in order) by what each has
// available: every partition with events gets a fair share, and what one
// cannot use goes to the others.
func shareOut(parts []int32, avail map[int32]int64, max int) []int64 {
	limits := make([]int64, len(parts))
	left := int64(max)
	for left > 0 {
		var open []int
		for i, p := range parts {
			if avail[p] > limits[i] {
				open = append(open, i)
			}
		}
		if len(open) == 0 {
			break
		}
		share := left / int64(len(open))
		if share == 0 {
			share = 1
		}
		for _, i := range open {
			add := min(share, avail[parts[i]]-limits[i], left)
			limits[i] += add
			left -= add
			if left == 0 {
				break
			}
		}
	}
	return limits
}

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
			var gid, gen int64
			err := tx.QueryRow(ctx, `/* ferry:consumer_group_read */ SELECT id, generation FROM ferry.consumer_groups WHERE topic_id = $1 AND name = $2`,
				p.Topic.ID, p.Group).Scan(&gid, &gen)
			if err != nil {
				return err
			}
			var beyond *int32
			if err := tx.QueryRow(ctx, `/* ferry:consumer_group_commit_check */
				SELECT min(v.partition) FROM unnest($2::int[], $3::bigint[]) AS v(partition, off)
				LEFT JOIN ferry.topic_partitions tp ON tp.topic_id = $1 AND tp.partition = v.partition
				WHERE tp.partition IS NULL OR v.off >= tp.next_offset`, p.Topic.ID, parts, offs).Scan(&beyond); err != nil {
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
				WITH seen AS (
					UPDATE ferry.group_members SET last_seen = now() WHERE group_id = $1 AND consumer = $2
				),
				done AS (
					UPDATE ferry.group_partitions gp SET committed_offset = greatest(gp.committed_offset, v.off)
					FROM unnest($4::int[], $5::bigint[]) AS v(partition, off)
					WHERE gp.group_id = $1 AND gp.partition = v.partition AND gp.owner = $2 AND gp.owner_generation <= $3
					RETURNING 1
				)
				SELECT count(*) FROM done`, gid, p.Consumer, p.Generation, parts, offs).Scan(&n)
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
// the seek are fenced. Latest: the next event published; Earliest: the
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
			var gid int64
			err := tx.QueryRow(ctx, `/* ferry:consumer_group_lock */ SELECT id FROM ferry.consumer_groups WHERE topic_id = $1 AND name = $2 FOR UPDATE`,
				p.Topic.ID, p.Group).Scan(&gid)
			if err != nil {
				return err
			}
			if mode == "offsets" {
				var bad *int32
				if err := tx.QueryRow(ctx, `/* ferry:consumer_group_seek_check */
					SELECT min(v.partition) FROM unnest($2::int[], $3::bigint[]) AS v(partition, off)
					LEFT JOIN ferry.topic_partitions tp ON tp.topic_id = $1 AND tp.partition = v.partition
					WHERE tp.partition IS NULL OR v.off > tp.next_offset`, p.Topic.ID, parts, nexts).Scan(&bad); err != nil {
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
				UPDATE ferry.group_partitions gp SET committed_offset = c.committed, fetch_offset = c.committed + 1,
					owner_generation = CASE WHEN gp.owner IS NULL THEN gp.owner_generation ELSE $3 END
				FROM ferry.topic_partitions tp
				CROSS JOIN LATERAL (
					SELECT CASE $4
						WHEN 'earliest' THEN coalesce((SELECT "offset" FROM ferry.events WHERE topic_id = $2 AND partition = tp.partition ORDER BY "offset" LIMIT 1), tp.next_offset) - 1
						WHEN 'time' THEN coalesce(
							(SELECT "offset" FROM ferry.events WHERE topic_id = $2 AND partition = tp.partition AND published_at >= $5
							 ORDER BY published_at, "offset" LIMIT 1), tp.next_offset) - 1
						WHEN 'latest' THEN tp.next_offset - 1
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
				SELECT gp.partition, gp.committed_offset, tp.next_offset - 1, gp.owner, gp.expired_skipped
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

func consumerGroupDeleteRows(ctx context.Context, tx DBTX, ids []int64) error {
	if _, err := tx.Exec(ctx, `DELETE FROM ferry.group_members WHERE group_id = ANY($1)`, ids); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM ferry.group_partitions WHERE group_id = ANY($1)`, ids)
	return err
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
		SELECT g.topic_id, g.name, gp.partition, greatest(0, tp.next_offset - 1 - gp.committed_offset)
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
