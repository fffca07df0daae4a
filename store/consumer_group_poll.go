package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
		SELECT p.partition, greatest(0, `+partitionNextSQL("tp")+` - p.from_offset), g.generation
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
		SELECT e.id, e.type, e.key, e.data::text, e.attributes::text, e.ce::text, e.partition, e."offset", e.published_at
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
// of partitions still owned, got in the poll's generation or before, whose
// rows it locks in share mode against a rebalance — marks the member as
// seen, and reads which partitions it still owns. It writes no row of
// ferry.group_partitions: the positions are rows it inserts (see
// groupPositionMoveSQL). A
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
		WITH seen AS (`+memberSeenSQL+`),
		held AS (
			SELECT gp.partition, gp.owner_generation AS epoch, `+groupFetchSQL("gp")+` AS at
			FROM ferry.group_partitions gp
			WHERE gp.group_id = $1 AND gp.owner = $2 AND gp.owner_generation <= $3
			FOR SHARE
		),
		`+groupPositionMoveSQL("ferry.group_fetches")+`
		SELECT partition FROM held`,
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
