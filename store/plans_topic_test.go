package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestPlansTopic attacks the plans of the topic side's hot statements
// (DESIGN.md invariant 11): publish and fan-out, event reads, retention,
// backfill and seek windows and push attempts must each
// do work proportional to their batch with a backlog of planBacklog
// events (and their deliveries), under every planHistory.
func TestPlansTopic(t *testing.T) {
	t.Parallel()
	runPlanCasesNotOnAnalyzedEmpty(t, []planCase{
		{
			name:   "event_publish",
			warmUp: warmUpOtherTopic,
			setup:  planTopicWithSubs,
			fill:   fillPlanTopic(topicFill{}),
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				evs := make([]store.PublishEvent, 100)
				for i := range evs {
					key := fmt.Sprintf("key-%d", i) // keys the backlog's ordered deliveries have
					evs[i] = store.PublishEvent{Type: "order.created", Key: &key, Data: json.RawMessage(`{"n":1}`)}
					if i%10 == 0 {
						// Ids of backlog events (duplicates once it is there).
						evs[i].ID = fmt.Sprintf("evt-%d-%d-%d", f.Topic.ID, i%4, i)
					}
				}
				_, _, err := store.EventPublish(e.ctx, db, f.Topic, evs)
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
		{
			// The SQL API's publish (its functions' statements) and the
			// relay's append of what it left pending.
			name:   "sql_publish_relay",
			warmUp: warmUpOtherTopic,
			setup:  planTopicWithSubs,
			fill:   fillPlanTopic(topicFill{}),
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				evs := make([]map[string]any, 100)
				for i := range evs {
					evs[i] = map[string]any{"type": "order.created", "key": fmt.Sprintf("key-%d", i), "data": map[string]any{"n": 1}}
					if i%10 == 0 {
						evs[i]["id"] = fmt.Sprintf("evt-%d-%d-%d", f.Topic.ID, i%4, i)
					}
				}
				_, err := sqlPublish(e.ctx, db, f.Topic.Name, evs...)
				require.NoError(t, err)
				_, err = store.NewRelay(db, nil, store.RelayConfig{}).Drain(e.ctx)
				require.NoError(t, err)
				// The call of ferry.publish_batch counts the buffers of
				// every statement it runs (each checked on its own too):
				// per event a dedup claim, a pending row (a heap tuple
				// and two index entries each), a read and a nextval.
				return workBound{Batch: 100, BuffersPerRow: 40}
			},
		},
		{
			name:   "event_read",
			warmUp: warmUpOtherTopic,
			setup:  planTopic,
			fill:   fillPlanTopic(topicFill{}),
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, _, err := store.EventRead(e.ctx, db, nil, store.ReadParams{Topic: f.Topic, Partition: 1, FromOffset: 6000, Limit: 100})
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
		{
			name:   "event_read_from_time",
			warmUp: warmUpOtherTopic,
			setup:  planTopic,
			fill:   fillPlanTopic(topicFill{}),
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				from := middleOf(t, e, f)
				_, _, err := store.EventRead(e.ctx, db, nil, store.ReadParams{Topic: f.Topic, Partition: 1, FromTime: &from, Limit: 100})
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
		{
			// A long poll at the head re-reads (here every 10 ms) until
			// its wait ends; each re-read must find nothing cheaply.
			name:   "event_read_long_poll",
			warmUp: warmUpOtherTopic,
			setup:  planTopic,
			fill:   fillPlanTopic(topicFill{}),
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				head := e.count(`SELECT `+store.PartitionNextSQL("p")+` FROM ferry.topic_partitions p WHERE p.topic_id = $1 AND p.partition = 1`, f.Topic.ID)
				n := store.NewNotifier(e.pool, 0, slog.New(slog.DiscardHandler))
				evs, _, err := store.EventRead(e.ctx, db, n, store.ReadParams{
					Topic: f.Topic, Partition: 1, FromOffset: head, Limit: 100,
					Wait: 60 * time.Millisecond, FallbackPoll: 10 * time.Millisecond,
				})
				require.NoError(t, err)
				require.Empty(t, evs)
				return workBound{Batch: 100}
			},
		},
		{
			name:   "event_expire",
			warmUp: warmUpOtherTopic,
			setup: func(t *testing.T, e *env) *planFixture {
				boundCase(t, e)
				return &planFixture{Topic: e.topic("plan-topic", store.TopicPatch{RetentionSeconds: ptr(3600)})}
			},
			fill: fillPlanTopic(topicFill{age: 2 * time.Hour}),
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.EventExpire(e.ctx, db, 100)
				require.NoError(t, err)
				return workBound{Batch: 4 * 100} // per partition
			},
		},
		{
			// The idle sweep's question over a topic whose partitions
			// hold old events: one probe per partition.
			name:   "retention_due_events",
			warmUp: warmUpOtherTopic,
			setup: func(t *testing.T, e *env) *planFixture {
				return &planFixture{Topic: e.topic("plan-topic", store.TopicPatch{RetentionSeconds: ptr(3600)})}
			},
			fill: fillPlanTopic(topicFill{age: 2 * time.Hour}),
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				// The topics' part of the statement is evaluated first,
				// so it runs whatever else is due (on the empty tables
				// of a warm-up nothing is).
				_, err := store.RetentionDue(e.ctx, db, store.RetentionKeep{PushAttempts: time.Hour, Audit: time.Hour})
				require.NoError(t, err)
				return workBound{Batch: 4} // a probe per partition
			},
		},
		{
			name:   "event_dedup_expire",
			warmUp: warmUpOtherTopic,
			setup:  planTopic,
			fill:   fillPlanTopic(topicFill{dedupTTL: -time.Hour}),
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.EventDedupExpire(e.ctx, db, 100)
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
		{
			name:   "topic_offsets",
			warmUp: warmUpOtherTopic,
			setup:  planTopic,
			fill:   fillPlanTopic(topicFill{}),
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.TopicOffsets(e.ctx, db, []int64{f.Topic.ID})
				require.NoError(t, err)
				return workBound{Batch: 4}
			},
		},
		{
			name:   "topic_delete_content",
			warmUp: warmUpOtherTopic,
			setup:  planTopic,
			fill:   fillPlanTopic(topicFill{}),
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.TopicDeleteContent(e.ctx, db, f.Topic.ID, 1000)
				require.NoError(t, err)
				return workBound{Batch: 1000}
			},
		},
		backfillCase("subscription_backfill", false),
		backfillCase("subscription_backfill_ordered", true),
		seekCase("subscription_seek", "all"),
		seekCase("subscription_seek_ordered", "keyed"),
		{
			name:   "push_attempt_record",
			warmUp: warmUpOtherTopic,
			setup:  planPushQueue,
			fill:   fillPushAttempts,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				attempts := make([]store.PushAttempt, 100)
				for i := range attempts {
					attempts[i] = store.PushAttempt{MessageID: fmt.Sprint(i), Attempt: 1, OK: true, StatusCode: ptr(200), At: time.Now()}
				}
				require.NoError(t, store.PushAttemptRecord(e.ctx, db, f.Queue.ID, attempts))
				return workBound{Batch: 100}
			},
		},
		{
			name:   "push_attempt_expire",
			warmUp: warmUpOtherTopic,
			setup:  planPushQueue,
			fill:   fillPushAttempts,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.PushAttemptExpire(e.ctx, db, time.Hour, 100)
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
		{
			// The failed attempts among many successes.
			name:   "push_attempt_list",
			warmUp: warmUpOtherTopic,
			setup:  planPushQueue,
			fill:   fillPushAttempts,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.PushAttemptList(e.ctx, db, f.Queue.ID, "failed", 100)
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
		{
			// Push targets with a backlog each: one probe of the claim
			// index and one of the leases per target.
			name:   "push_sweep",
			warmUp: warmUpOtherTopic,
			setup:  planPushQueue,
			fill: func(t *testing.T, e *env, f *planFixture) {
				fillQueue(t, e, f.Queue, planBacklog)
			},
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.PushSweep(e.ctx, db, "00000000-0000-4000-8000-000000000001")
				require.NoError(t, err)
				return workBound{Batch: 2}
			},
		},
	})
}

// TestPlansGroups attacks the plans of a consumer group's statements
// (poll, creation, commit, seek, leave, describe) the same way, under
// every planHistory (generic plans made after an ANALYZE found the tables
// empty included), with a history of other groups' positions
// (fillGroupTopic) that they must probe by key.
func TestPlansGroups(t *testing.T) {
	t.Parallel()
	runPlanCases(t, []planCase{
		{
			// A new member joins: the group rebalances, then it fetches.
			name:   "group_poll",
			warmUp: warmUpOtherTopic,
			setup:  planTopicWithGroup,
			fill:   fillGroupTopic,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				// The member of the run before left (its session ran out).
				if prev, ok := f.State["member"].(int); ok {
					e.expireMember(f.Topic, "g", fmt.Sprintf("member-%d", prev))
				}
				res := groupPoll(t, e, db, f, nextName(f, "member"), store.StartPosition{Earliest: true})
				require.True(t, res.Rebalanced)
				require.NotEmpty(t, res.Partitions)
				return workBound{Batch: 100}
			},
		},
		{
			// A new group positioned at a time: a position per partition.
			name:   "group_create",
			warmUp: warmUpOtherTopic,
			setup:  planTopic,
			fill:   fillGroupTopic,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				from := middleOf(t, e, f)
				_, err := store.ConsumerGroupPoll(e.ctx, db, nil, store.ConsumerGroupPollParams{
					Topic: f.Topic, Group: nextName(f, "group"), Consumer: "c", SessionTimeout: time.Minute,
					Start: store.StartPosition{Time: &from}, Max: 100,
				})
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
		{
			name:   "group_commit",
			warmUp: warmUpOtherTopic,
			setup:  planTopicWithGroup,
			fill:   fillGroupTopic,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				res := groupPoll(t, e, e.pool, f, "c", store.StartPosition{})
				offsets := map[int]int64{}
				for _, ev := range res.Events {
					offsets[ev.Partition] = ev.Offset
				}
				err := store.ConsumerGroupCommit(e.ctx, db, store.ConsumerGroupCommitParams{
					Topic: f.Topic, Group: "g", Consumer: "c", Generation: res.Generation, Offsets: offsets,
				})
				require.NoError(t, err)
				return workBound{Batch: 4}
			},
		},
		{
			name:   "group_seek",
			warmUp: warmUpOtherTopic,
			setup:  planTopicWithGroup,
			fill:   fillGroupTopic,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				from := middleOf(t, e, f)
				err := store.ConsumerGroupSeek(e.ctx, db, store.ConsumerGroupSeekParams{Topic: f.Topic, Group: "g", Start: store.StartPosition{Time: &from}})
				require.NoError(t, err)
				return workBound{Batch: 4}
			},
		},
		{
			// A second member joins, then leaves: the leave rebalances its
			// partitions back to "c".
			name:   "group_leave",
			warmUp: warmUpOtherTopic,
			setup:  planTopicWithGroup,
			fill:   fillGroupTopic,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				member := nextName(f, "member")
				require.NotEmpty(t, groupPoll(t, e, e.pool, f, member, store.StartPosition{}).Partitions)
				res, err := store.ConsumerGroupLeave(e.ctx, db, nil, store.ConsumerGroupLeaveParams{Topic: f.Topic, Group: "g", Consumer: member})
				require.NoError(t, err)
				require.True(t, res.Left)
				require.True(t, res.Rebalanced)
				return workBound{Batch: 4}
			},
		},
		{
			name:   "group_describe",
			warmUp: warmUpOtherTopic,
			setup:  planTopicWithGroup,
			fill:   fillGroupTopic,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.ConsumerGroupDescribe(e.ctx, db, f.Topic, "g")
				require.NoError(t, err)
				return workBound{Batch: 4}
			},
		},
	})
}

// backfillCase creates a subscription of the topic from its earliest
// event, each run a new one: every statement of the backfill is one
// window (backfillWindow offsets) of the log.
func backfillCase(name string, ordered bool) planCase {
	return planCase{
		name:   name,
		warmUp: warmUpOtherTopic,
		setup:  planTopic,
		fill:   fillPlanTopic(topicFill{}),
		run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
			filter, err := store.ParseFilter([]byte(`{"types": ["order.#", "#.refunded"], "attributes": {"source": ["fill"]}}`))
			require.NoError(t, err)
			_, created, _, err := store.SubscriptionUpsert(e.ctx, db, f.Topic, nextName(f, "backfilled"), store.SubscriptionPatch{
				Filter: filter, Ordered: &ordered, Start: store.StartPosition{Earliest: true},
			})
			require.NoError(t, err)
			require.True(t, created)
			return windowBound
		},
	}
}

// seekCase seeks the named subscription (of planTopicWithSubs) to the
// earliest event: its pending deliveries are removed and the log
// delivered again, a bounded window per statement.
func seekCase(name, sub string) planCase {
	return planCase{
		name:   name,
		warmUp: warmUpOtherTopic,
		setup:  planTopicWithSubs,
		fill:   fillPlanTopic(topicFill{}),
		run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
			s, err := store.SubscriptionGet(e.ctx, e.pool, f.Topic.ID, sub)
			require.NoError(t, err)
			_, err = store.SubscriptionSeek(e.ctx, db, s, store.StartPosition{Earliest: true})
			require.NoError(t, err)
			return windowBound
		},
	}
}

// windowBound is what one statement of a backfill or seek may touch: a
// window of 5,000 events (backfillWindow), each looked at about twice
// (the event, the check for its delivery), so that a statement reading
// the whole backlog (planBacklog) is far past it. Each delivery written
// costs some 20-35 buffers, legitimately: its heap tuple and four index
// entries (primary key, claim, group, event position, each a descent),
// the probes for an existing delivery and a live group head, and the
// event read; a seek's probes also step over the deliveries it deleted.
var windowBound = workBound{Batch: 5000, RowsPerItem: 2, BuffersPerRow: 40}

// planTopic creates the topic a case works on: 4 partitions.
func planTopic(t *testing.T, e *env) *planFixture {
	boundCase(t, e)
	return &planFixture{Topic: e.topic("plan-topic", store.TopicPatch{Partitions: ptr(4)})}
}

// planTopicWithSubs is planTopic with two subscriptions the backlog's
// events are delivered to: "all" (unordered, no filter) and "keyed"
// (ordered by key, events of type order.#).
func planTopicWithSubs(t *testing.T, e *env) *planFixture {
	f := planTopic(t, e)
	all, _ := e.subscribe(f.Topic, "all", "", store.SubscriptionPatch{})
	keyed, _ := e.subscribe(f.Topic, "keyed", `{"types": ["order.#"]}`, store.SubscriptionPatch{Ordered: ptr(true)})
	f.Sub = all
	f.State = map[string]any{"subs": []store.Subscription{all, keyed}}
	return f
}

// planTopicWithGroup is planTopic with a group "g" whose member "c" owns
// every partition, positioned before the (future) backlog.
func planTopicWithGroup(t *testing.T, e *env) *planFixture {
	f := planTopic(t, e)
	e.gpoll(f.Topic, "g", "c", 1)
	return f
}

// planPushQueue creates a push queue (a target of the push sweep and of
// push attempts).
func planPushQueue(t *testing.T, e *env) *planFixture {
	boundCase(t, e)
	return &planFixture{Queue: e.queue("plan-push", store.QueuePatch{
		Push: &store.PushPatch{URL: ptr("https://example.com/hook"), NewSecret: "whsec_plan"},
	})}
}

// boundCase gives the case's fill and runs a deadline: a statement that
// walks the backlog again and again (the cliff under attack) fails the
// case instead of hanging the suite.
func boundCase(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
}

// groupPoll polls group "g" of the fixture's topic once as consumer, on db.
func groupPoll(t *testing.T, e *env, db *pgxpool.Pool, f *planFixture, consumer string, start store.StartPosition) store.ConsumerGroupPollResult {
	t.Helper()
	res, err := store.ConsumerGroupPoll(e.ctx, db, nil, store.ConsumerGroupPollParams{
		Topic: f.Topic, Group: "g", Consumer: consumer, SessionTimeout: time.Minute, Start: start, Max: 100,
	})
	require.NoError(t, err)
	return res
}

// nextName is prefix-1, prefix-2, ... for each run of a case.
func nextName(f *planFixture, prefix string) string {
	n, _ := f.State[prefix].(int)
	f.State[prefix] = n + 1
	return fmt.Sprintf("%s-%d", prefix, n+1)
}

// middleOf is the publish time of an event in the middle of partition 1
// of the fixture's topic (now, while it has none).
func middleOf(t *testing.T, e *env, f *planFixture) time.Time {
	t.Helper()
	var at time.Time
	err := e.pool.QueryRow(e.ctx, `
		SELECT coalesce((SELECT published_at FROM ferry.events WHERE topic_id = $1 AND partition = 1
			ORDER BY "offset" OFFSET 6000 LIMIT 1), now())`, f.Topic.ID).Scan(&at)
	require.NoError(t, err)
	return at
}

// topicFill is how fillTopic builds a topic's backlog.
type topicFill struct {
	events int // default planBacklog
	// age is how long before now the backlog's first event was published
	// (default: just now); the events follow a microsecond apart.
	age time.Duration
	// dedupTTL is how long after its publish each event's id is
	// remembered (default 5 minutes; negative: all expired).
	dedupTTL time.Duration
	// subs get a delivery of every event, as a publish fans out (ordered
	// ones grouped by key, all but the first of a key waiting).
	subs []store.Subscription
}

// fillPlanTopic fills the fixture's topic, delivering to the fixture's
// subscriptions (State "subs") if it has any.
func fillPlanTopic(fill topicFill) func(t *testing.T, e *env, f *planFixture) {
	return func(t *testing.T, e *env, f *planFixture) {
		fill := fill
		fill.subs, _ = f.State["subs"].([]store.Subscription)
		fillTopic(t, e, f.Topic, fill)
	}
}

// fillGroupTopic is fillPlanTopic with a history of group positions: rows
// of ferry.group_fetches and ferry.group_commits of other groups (as their
// polls and commits leave them) and, below the positions of the case's
// group "g" in its epochs, rows standing for those its moves replaced: a
// group's statements must take the newest by key, never scan them. (The
// rows are live: dead ones below no live row, a state no move leaves,
// would be walked by the backward scan. The bitmap scan that a held
// snapshot's dead rows brought, measured in the bench, is not attacked.)
func fillGroupTopic(t *testing.T, e *env, f *planFixture) {
	t.Helper()
	fillPlanTopic(topicFill{})(t, e, f)
	for _, log := range []string{"ferry.group_fetches", "ferry.group_commits"} {
		_, err := e.pool.Exec(e.ctx, `
			WITH others AS (
				INSERT INTO `+log+` (group_id, partition, epoch, "offset")
				SELECT -g / 1000, 0, 0, g FROM generate_series(1, $2) AS g
			)
			INSERT INTO `+log+` (group_id, partition, epoch, "offset")
			SELECT gp.group_id, gp.partition, gp.owner_generation, -g
			FROM ferry.consumer_groups cg
			JOIN ferry.group_partitions gp ON gp.group_id = cg.id
			CROSS JOIN generate_series(1, $2 / 4) AS g
			WHERE cg.topic_id = $1 AND cg.name = 'g'`, f.Topic.ID, planBacklog)
		require.NoError(t, err)
	}
}

// fillTopic appends a backlog of events to tp straight in SQL, as
// publishes would leave it (but fast): events spread round-robin over
// the partitions after their heads, with keys key-0..key-999, type
// order.created and attributes {"source": "fill"}; their dedup rows; and
// deliveries to fill.subs.
func fillTopic(t *testing.T, e *env, tp store.Topic, fill topicFill) {
	t.Helper()
	if fill.events == 0 {
		fill.events = planBacklog
	}
	if fill.dedupTTL == 0 {
		fill.dedupTTL = 5 * time.Minute
	}
	subIDs, ordered := []int64{}, []bool{}
	for _, s := range fill.subs {
		subIDs, ordered = append(subIDs, s.ID), append(ordered, s.Ordered)
	}
	_, err := e.pool.Exec(e.ctx, `
		WITH parts AS (
			SELECT p.partition, `+store.PartitionNextSQL("p")+` AS next_offset, count(*) OVER () AS np FROM ferry.topic_partitions p WHERE p.topic_id = $1
		),
		ev AS (
			SELECT g, p.partition, p.next_offset + g / p.np AS off,
				now() - make_interval(secs => $3) + g * interval '1 microsecond' AS at
			FROM generate_series(0, $2 - 1) AS g JOIN parts p ON p.partition = g % p.np
		),
		ins AS (
			INSERT INTO ferry.events (topic_id, partition, "offset", id, type, key, published_at, attributes, data)
			SELECT $1, partition, off, format('evt-%s-%s-%s', $1, partition, off), 'order.created',
				'key-' || (g % 1000), at, '{"source": "fill"}', jsonb_build_object('seq', g)
			FROM ev
			RETURNING *
		),
		dedup AS (
			INSERT INTO ferry.event_dedup (topic_id, event_id, partition, "offset", expires_at)
			SELECT $1, id, partition, "offset", published_at + make_interval(secs => $4) FROM ins
			ON CONFLICT DO NOTHING
		),
		bumped AS (
			UPDATE ferry.topic_partitions tp SET next_offset = tp.next_offset + c.n
			FROM (SELECT partition, count(*) AS n FROM ev GROUP BY partition) c
			WHERE tp.topic_id = $1 AND tp.partition = c.partition
		)
		INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, sent_at, grp, event_id, event_partition, event_offset, body)
		SELECT s.id, nextval('ferry.message_id_seq'), i.published_at,
			s.ordered AND row_number() OVER (PARTITION BY s.id, i.key ORDER BY i.partition, i."offset") > 1,
			i.published_at, CASE WHEN s.ordered THEN i.key END, i.id, i.partition, i."offset",
			ferry.event_json(i.id, i.type, i.key, i.data, i.attributes, i.partition, i."offset", i.published_at)
		FROM ins i CROSS JOIN unnest($5::bigint[], $6::bool[]) AS s(id, ordered)`,
		tp.ID, fill.events, fill.age.Seconds(), fill.dedupTTL.Seconds(), subIDs, ordered)
	require.NoError(t, err)
}

// fillPushAttempts records planBacklog successful attempts of the
// fixture's queue, from two hours ago on, and after them a few failures.
func fillPushAttempts(t *testing.T, e *env, f *planFixture) {
	t.Helper()
	fillAttempts(t, e, f.Queue.ID, planBacklog)
}

func fillAttempts(t *testing.T, e *env, queueID int64, n int) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		INSERT INTO ferry.push_attempts (queue_id, message_id, attempt, ok, status_code, duration_ms, at)
		SELECT $1, 'm-' || g, 1, g > 10, CASE WHEN g > 10 THEN 200 ELSE 500 END, 5,
			now() - interval '2 hours' + g * interval '1 millisecond'
		FROM generate_series(1, $2) AS g`, queueID, n)
	require.NoError(t, err)
}

// warmUpOtherTopic adds to warmUpOtherData an older topic with a backlog
// of events (ids still remembered), a subscription holding their
// deliveries, a consumer group reading it, and an older push queue with
// attempts: ANALYZE then records topic_id, queue_id and group_id
// distributions the case's new topic, subscriptions, groups and queues
// are not part of.
func warmUpOtherTopic(t *testing.T, e *env) {
	t.Helper()
	tp := e.topic("older-topic", store.TopicPatch{Partitions: ptr(4)})
	sub, _ := e.subscribe(tp, "older-sub", "", store.SubscriptionPatch{})
	fillTopic(t, e, tp, topicFill{subs: []store.Subscription{sub}})
	e.gpoll(tp, "older-group", "c", 100)
	q := e.queue("older-push-queue", store.QueuePatch{})
	fillAttempts(t, e, q.ID, planBacklog)
}
