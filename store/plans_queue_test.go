package store_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestPlansQueue attacks the plans of the queue's hot statements
// (DESIGN.md invariant 11): each must do work proportional to its batch
// with a backlog of planBacklog messages, under every planHistory.
func TestPlansQueue(t *testing.T) {
	t.Parallel()
	newQueue := func(t *testing.T, e *env) *planFixture {
		return &planFixture{Queue: e.queue("plan-queue", store.QueuePatch{})}
	}
	fill := func(t *testing.T, e *env, f *planFixture) { fillQueue(t, e, f.Queue, planBacklog) }
	runPlanCases(t, []planCase{
		{
			name:  "claim",
			setup: newQueue,
			fill:  fill,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, _, err := store.MessageClaim(e.ctx, db, store.ClaimParams{Queue: f.Queue, Max: 100, VisibilityTimeout: time.Minute})
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
		{
			// A push worker's claim, fenced by its lease in the statement.
			name: "push_claim",
			setup: func(t *testing.T, e *env) *planFixture {
				q := e.pushQueue("plan-push")
				_, err := store.PushLeaseAcquire(e.ctx, e.pool, ownerA, []int64{q.ID}, time.Hour)
				require.NoError(t, err)
				return &planFixture{Queue: q}
			},
			fill: fill,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, _, err := store.PushLeaseClaim(e.ctx, db, ownerA, store.ClaimParams{Queue: f.Queue, Max: 100, VisibilityTimeout: time.Minute})
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
	})
}

// TestPlansQueueSettle attacks the statements that settle claimed
// messages: claim's dead-lettering of exhausted messages, ack, nack and
// extend, with their group locks (ferry.message_group_lock) and group promotions
// (ferry.message_promote). Grouped backlogs hold one group of planBacklog/2
// messages and many groups of two, so that both walking a group and
// walking the queue show.
func TestPlansQueueSettle(t *testing.T) {
	t.Parallel()
	newQueue := func(t *testing.T, e *env) *planFixture {
		return &planFixture{Queue: e.queue("plan-queue", store.QueuePatch{})}
	}
	groups := func(t *testing.T, e *env, f *planFixture) { fillGroups(t, e, f.Queue, 0, 0) }
	plain := func(t *testing.T, e *env, f *planFixture) { fillQueue(t, e, f.Queue, planBacklog) }
	runPlanCases(t, []planCase{
		{
			name:  "claim_dead_letter",
			setup: newQueue,
			// Every message has had its receives: each claim pass
			// dead-letters its 100 candidates and promotes their groups'
			// next messages.
			fill: func(t *testing.T, e *env, f *planFixture) { fillGroups(t, e, f.Queue, f.Queue.MaxReceives, 0) },
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				if e.live(f.Queue) == 0 {
					seedMessages(t, e, f.Queue, f.Queue.MaxReceives, 0)
				}
				msgs, dead, err := store.MessageClaim(e.ctx, db, store.ClaimParams{Queue: f.Queue, Max: 100, VisibilityTimeout: time.Minute})
				require.NoError(t, err)
				require.Empty(t, msgs)
				require.Positive(t, dead)
				return deadLettering(promotes(promoting(100)))
			},
		},
		{
			name:  "ack",
			setup: newQueue,
			fill:  groups,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				rs := claimedOrSeeded(t, e, f.Queue, true)
				res, _, err := store.MessageAck(e.ctx, db, f.Queue.ID, rs)
				require.NoError(t, err)
				requireAllOK(t, res)
				return promotes(promoting(len(rs)))
			},
		},
		{
			name:  "ack_ungrouped",
			setup: newQueue,
			fill:  plain,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				rs := claimedOrSeeded(t, e, f.Queue, false)
				res, err := store.MessageAckUngrouped(e.ctx, db, f.Queue.ID, rs)
				require.NoError(t, err)
				requireAllOK(t, res)
				return workBound{Batch: len(rs)}
			},
		},
		{
			// 100 acks among planBacklog messages in flight, all in the
			// ring slot their leases end in: each receipt is one probe
			// there. Not yet held in one more history: a generic plan
			// made after an ANALYZE found the slot empty joins the
			// DELETE to a scan of the whole slot per receipt (seen in
			// the receive+ack bench; the open part of issue 22).
			name:  "ack_among_in_flight",
			setup: newQueue,
			fill: func(t *testing.T, e *env, f *planFixture) {
				fillQueue(t, e, f.Queue, planBacklog)
				e.leaseAll(f.Queue, 30*time.Second)
			},
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				rs := e.inFlight(f.Queue, 100)
				if len(rs) == 0 {
					rs = claimedOrSeeded(t, e, f.Queue, false)
				}
				res, err := store.MessageAckUngrouped(e.ctx, db, f.Queue.ID, rs)
				require.NoError(t, err)
				requireAllOK(t, res)
				return workBound{Batch: len(rs)}
			},
		},
		{
			name:  "nack_release",
			setup: newQueue,
			fill:  groups,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				rs := claimedOrSeeded(t, e, f.Queue, true)
				res, dead, err := store.MessageNack(e.ctx, db, store.NackParams{Queue: f.Queue, Receipts: rs, Delay: ptr(time.Hour)})
				require.NoError(t, err)
				requireAllOK(t, res)
				require.Zero(t, dead)
				return rewriting(len(rs))
			},
		},
		{
			name:  "nack_dead_letter",
			setup: newQueue,
			fill:  groups,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				rs := claimedOrSeeded(t, e, f.Queue, true)
				res, dead, err := store.MessageNack(e.ctx, db, store.NackParams{Queue: f.Queue, Receipts: rs, DeadLetter: true})
				require.NoError(t, err)
				requireAllOK(t, res)
				require.Equal(t, len(rs), dead)
				return deadLettering(promotes(promoting(len(rs))))
			},
		},
		{
			name:  "extend",
			setup: newQueue,
			fill:  plain,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				rs := claimedOrSeeded(t, e, f.Queue, false)
				res, err := store.MessageExtend(e.ctx, db, f.Queue.ID, rs, time.Hour)
				require.NoError(t, err)
				requireAllOK(t, res)
				return workBound{Batch: len(rs)}
			},
		},
	})
}

// TestPlansQueueDeadLetters attacks redrive (by ids, by event ids, by
// limit; into groups that have live messages), the dead-letter list and
// the dead-letter purge, with planBacklog dead letters in the queue and
// planBacklog live messages in the same groups.
func TestPlansQueueDeadLetters(t *testing.T) {
	t.Parallel()
	newQueue := func(t *testing.T, e *env) *planFixture {
		return &planFixture{Queue: e.queue("plan-queue", store.QueuePatch{})}
	}
	deadAndLive := func(t *testing.T, e *env, f *planFixture) {
		fillDeadLetters(t, e, f.Queue, 0)
		fillGroups(t, e, f.Queue, 0, 0)
	}
	redrive := func(p func(t *testing.T, e *env, f *planFixture) store.RedriveParams) func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
		return func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
			if e.deadLetters(f.Queue) == 0 {
				seedDeadLetters(t, e, f.Queue, 0)
			}
			n, err := store.DeadLetterRedrive(e.ctx, db, p(t, e, f))
			require.NoError(t, err)
			require.Positive(t, n)
			// Each dead letter is deleted and inserted into the queue
			// (four indexes) behind a probe of its group.
			return promoting(100)
		}
	}
	oldest := func(t *testing.T, e *env, f *planFixture) []int64 {
		// The oldest 50 (of the big group, after the fill) and the oldest
		// 50 of other groups.
		return e.int64s(`
			(SELECT id FROM ferry.dead_letters WHERE queue_id = $1 ORDER BY id LIMIT 50)
			UNION
			(SELECT id FROM ferry.dead_letters WHERE queue_id = $1 AND grp IS DISTINCT FROM 'big' ORDER BY id LIMIT 50)`, f.Queue.ID)
	}
	runPlanCasesNotOnAnalyzedEmpty(t, []planCase{
		{
			name:  "redrive_ids",
			setup: newQueue,
			fill:  deadAndLive,
			run: redrive(func(t *testing.T, e *env, f *planFixture) store.RedriveParams {
				return store.RedriveParams{QueueID: f.Queue.ID, IDs: oldest(t, e, f)}
			}),
		},
		{
			name:  "redrive_event_ids",
			setup: newQueue,
			fill:  deadAndLive,
			run: redrive(func(t *testing.T, e *env, f *planFixture) store.RedriveParams {
				var events []string
				for _, id := range oldest(t, e, f) {
					events = append(events, fmt.Sprintf("e%d", id))
				}
				return store.RedriveParams{QueueID: f.Queue.ID, EventIDs: events}
			}),
		},
		{
			name:  "redrive_limit",
			setup: newQueue,
			fill:  deadAndLive,
			run: redrive(func(t *testing.T, e *env, f *planFixture) store.RedriveParams {
				return store.RedriveParams{QueueID: f.Queue.ID, Limit: 100}
			}),
		},
		{
			name:  "dead_letter_list",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillDeadLetters(t, e, f.Queue, 0) },
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, _, err := store.DeadLetterList(e.ctx, db, f.Queue.ID, 0, 100)
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
		{
			name:  "dead_letter_purge",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillDeadLetters(t, e, f.Queue, 0) },
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				require.NoError(t, store.DeadLetterPurgeBatch(e.ctx, db, f.Queue.ID, 500))
				require.Zero(t, e.deadLetters(f.Queue))
				return workBound{Batch: 500}
			},
		},
	})
}

// TestPlansQueueSweeps attacks the batches of purge and retention: message
// purge, message and dead-letter expiry, dedup expiry, the orphan sweep and
// the cleanup of a deleted queue's content.
func TestPlansQueueSweeps(t *testing.T) {
	t.Parallel()
	newQueue := func(t *testing.T, e *env) *planFixture {
		return &planFixture{Queue: e.queue("plan-queue", store.QueuePatch{})}
	}
	const fiveDays = 5 * 24 * 3600 // older than the default retention
	deleteContent := func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
		_, err := store.QueueDeleteContent(e.ctx, db, f.Queue.ID, 500)
		require.NoError(t, err)
		return workBound{Batch: 500}
	}
	runPlanCasesNotOnAnalyzedEmpty(t, []planCase{
		{
			name:  "message_purge",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillGroups(t, e, f.Queue, 0, 0) },
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				if e.live(f.Queue) == 0 {
					e.send(f.Queue, grouped("warm-a", 1), grouped("warm-a", 2), msg(1))
				}
				require.NoError(t, store.MessagePurgeBatch(e.ctx, db, f.Queue.ID, 500))
				require.Zero(t, e.live(f.Queue))
				// Each purged head promotes its group's next message.
				return promotes(promoting(500))
			},
		},
		{
			name:  "message_expire",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillGroups(t, e, f.Queue, 0, fiveDays) },
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				if e.live(f.Queue) == 0 {
					seedMessages(t, e, f.Queue, 0, fiveDays)
				}
				n, err := store.MessageExpire(e.ctx, db, 500)
				require.NoError(t, err)
				require.Positive(t, n.Total())
				return promotes(promoting(500))
			},
		},
		{
			name:  "dead_letter_expire",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillDeadLetters(t, e, f.Queue, fiveDays) },
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				if e.deadLetters(f.Queue) == 0 {
					seedDeadLetters(t, e, f.Queue, fiveDays)
				}
				n, err := store.MessageExpire(e.ctx, db, 500)
				require.NoError(t, err)
				require.Positive(t, n.Total())
				return workBound{Batch: 500}
			},
		},
		{
			name:  "dedup_expire",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillDedup(t, e, f.Queue) },
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				seedExpiredDedup(t, e, f.Queue)
				// A batch of 100: one of 500 is a fifth of the 50,000-row
				// table's pages, and a custom plan that knows the table's
				// size then rightly prefers one scan of it to 500 random
				// fetches; past a few hundred thousand rows it no longer
				// does. What this case attacks is the plans that believe
				// the table or the expired part of it small.
				n, err := store.DedupExpire(e.ctx, db, 100)
				require.NoError(t, err)
				require.Positive(t, n)
				return workBound{Batch: 100}
			},
		},
		{
			// The idle sweep's question (is anything due?) with half of
			// a large dedup table expired and the rest of the queue's
			// rows young: one probe of each age index.
			name:  "retention_due",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillDedup(t, e, f.Queue) },
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				seedExpiredDedup(t, e, f.Queue)
				due, err := store.RetentionDue(e.ctx, db, store.RetentionKeep{PushAttempts: time.Hour, Audit: time.Hour})
				require.NoError(t, err)
				require.True(t, due)
				return workBound{Batch: 1}
			},
		},
		{
			name:  "queue_orphans",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillCounts(t, e, f.Queue) },
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.QueueOrphans(e.ctx, db, 10)
				require.NoError(t, err)
				// The sweep looks at every queue with content, one probe
				// each: its batch is the queues, never their 64 slots.
				return workBound{Batch: planBacklog/64 + 1}
			},
		},
		{
			name:  "queue_delete_messages",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillGroups(t, e, f.Queue, 0, 0) },
			run:   deleteContent,
		},
		{
			name:  "queue_delete_dead_letters",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillDeadLetters(t, e, f.Queue, 0) },
			run:   deleteContent,
		},
		{
			name:  "queue_delete_dedup",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillDedup(t, e, f.Queue) },
			run:   deleteContent,
		},
	})
}

// TestPlansQueueSend attacks the send path: the plain INSERT, the grouped
// one (its check for live messages of each group), the dedup claims and
// the read of their answers, the max_depth check, and the queue's stats.
func TestPlansQueueSend(t *testing.T) {
	t.Parallel()
	newQueue := func(t *testing.T, e *env) *planFixture {
		return &planFixture{Queue: e.queue("plan-queue", store.QueuePatch{})}
	}
	send := func(msgs func(run int) []store.SendMessage) func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
		return func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
			s, ok := f.State["sender"].(*store.Sender)
			if !ok {
				s = e.newSenderOn(db, store.SenderConfig{})
				f.State["sender"] = s
			}
			run, _ := f.State["run"].(int)
			f.State["run"] = run + 1
			batch := msgs(run)
			res, _, err := s.Send(e.ctx, f.Queue.Name, batch)
			require.NoError(t, err)
			require.Len(t, res, len(batch))
			return workBound{Batch: len(batch)}
		}
	}
	// The same sends through the SQL API (ferry.send_batch in a
	// transaction of the probe's pool): the shared INSERTs, and what
	// ferry.send runs around them (checks, max_depth admission).
	sqlSend := func(msgs func(run int) []store.SendMessage) func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
		return func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
			run, _ := f.State["run"].(int)
			f.State["run"] = run + 1
			batch := msgs(run)
			res, err := sqlSend(e.ctx, db, f.Queue.Name, sendBatchJSON(t, batch))
			require.NoError(t, err)
			require.Len(t, res, len(batch))
			// The call's statement reports the buffers of every statement
			// it runs (the checks, the admission, the INSERT, the dedup
			// answers: REST's statements of the send together, and on a
			// fresh connection the compiling of the functions), so twice a
			// statement's; each of those statements is reported, and
			// checked, on its own too.
			return workBound{Batch: len(batch), BuffersPerRow: 40}
		}
	}
	maxDepthQueue := func(t *testing.T, e *env) *planFixture {
		return &planFixture{Queue: e.queue("plan-queue", store.QueuePatch{MaxDepth: ptr(int64(10 * planBacklog))})}
	}
	runPlanCases(t, []planCase{
		{
			name:  "sql_send",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillQueue(t, e, f.Queue, planBacklog) },
			run:   sqlSend(hundredPlain),
		},
		{
			name:  "sql_send_grouped",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillGroups(t, e, f.Queue, 0, 0) },
			run:   sqlSend(halfBusyGroups),
		},
		{
			name:  "sql_send_max_depth",
			setup: maxDepthQueue,
			fill: func(t *testing.T, e *env, f *planFixture) {
				fillQueue(t, e, f.Queue, planBacklog)
				fillDedup(t, e, f.Queue)
			},
			run: sqlSend(halfLiveDedup),
		},
		{
			name:  "send",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillQueue(t, e, f.Queue, planBacklog) },
			run:   send(hundredPlain),
		},
		{
			name:  "send_grouped",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillGroups(t, e, f.Queue, 0, 0) },
			run:   send(halfBusyGroups),
		},
		{
			name:  "send_dedup",
			setup: newQueue,
			fill: func(t *testing.T, e *env, f *planFixture) {
				fillQueue(t, e, f.Queue, planBacklog)
				fillDedup(t, e, f.Queue)
			},
			// Half the dedup ids are live in the backlog, half are new.
			run: send(halfLiveDedup),
		},
		{
			name:  "send_max_depth",
			setup: maxDepthQueue,
			fill: func(t *testing.T, e *env, f *planFixture) {
				fillQueue(t, e, f.Queue, planBacklog)
				fillDedup(t, e, f.Queue)
			},
			run: send(halfLiveDedup),
		},
	})
	// The stats read a ring slot whole under analyzedEmptyTables (a
	// generic plan, the slot analyzed with another queue's rows): not yet
	// mended.
	runPlanCasesNotOnAnalyzedEmpty(t, []planCase{
		{
			name:  "queue_stats",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillGroups(t, e, f.Queue, 0, 0) },
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.QueueStatsGet(e.ctx, db, []int64{f.Queue.ID})
				require.NoError(t, err)
				return workBound{Batch: 1}
			},
		},
	})
}

// fillGroups inserts planBacklog messages into q straight in SQL: one
// group "big" of planBacklog/2 (a head and the rest waiting behind it),
// then planBacklog/4 groups "g1", "g2", ... of a head and one waiting
// message. Heads are visible since an hour (before anything a case sends),
// the big group's first; every message has the given receive_count and
// was sent sentAgo seconds ago.
func fillGroups(t *testing.T, e *env, q store.Queue, receiveCount, sentAgo int) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, receive_count, sent_at, grp, body)
		SELECT $1, nextval('ferry.message_id_seq'), now() - interval '1 hour', s.k > 1, $3,
			now() - $4 * interval '1 second', s.grp, format('{"seq":%s}', s.k)::json
		FROM (
			SELECT 'big' AS grp, k, 0 AS i FROM generate_series(1, $2 / 2) AS k
			UNION ALL
			SELECT 'g' || i, k, i FROM generate_series(1, $2 / 4) AS i, generate_series(1, 2) AS k
			ORDER BY i, k
		) s`, q.ID, planBacklog, receiveCount, sentAgo)
	require.NoError(t, err)
}

// fillDeadLetters inserts planBacklog dead letters of q, grouped like
// fillGroups (their groups then get live messages from fillGroups, sent
// later), with event ids "e<id>" and positions, dead-lettered deadAgo
// seconds ago.
func fillDeadLetters(t *testing.T, e *env, q store.Queue, deadAgo int) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		INSERT INTO ferry.dead_letters (queue_id, id, sent_at, dead_lettered_at, receive_count, grp,
			event_id, event_partition, event_offset, body)
		SELECT $1, id, now() - $3 * interval '1 second', now() - $3 * interval '1 second', 5, grp,
			'e' || id, 0, id, body
		FROM (
			SELECT nextval('ferry.message_id_seq') AS id, s.grp, format('{"seq":%s}', s.k)::json AS body
			FROM (
				SELECT 'big' AS grp, k, 0 AS i FROM generate_series(1, $2 / 2) AS k
				UNION ALL
				SELECT 'g' || i, k, i FROM generate_series(1, $2 / 4) AS i, generate_series(1, 2) AS k
				ORDER BY i, k
			) s
		) d`, q.ID, planBacklog, deadAgo)
	require.NoError(t, err)
}

// fillDedup inserts planBacklog dedup ids of q: "live-<n>" within their
// window, "old-<n>" past it, a hundred to an expiry time (as sends of a
// hundred messages leave them: a transaction's dedup ids share one).
func fillDedup(t *testing.T, e *env, q store.Queue) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		INSERT INTO ferry.dedup (queue_id, dedup_id, message_id, expires_at)
		SELECT $1, CASE WHEN g % 2 = 0 THEN 'live-' ELSE 'old-' END || (g / 2), g,
			now() + CASE WHEN g % 2 = 0 THEN interval '1 hour' ELSE interval '-1 hour' END
				+ (g / 200) * interval '1 millisecond'
		FROM generate_series(0, $2 - 1) AS g
		ON CONFLICT DO NOTHING`, q.ID, planBacklog)
	require.NoError(t, err)
}

// fillCounts gives q and planBacklog/64 other queues counter rows in every
// slot, as busy queues have.
func fillCounts(t *testing.T, e *env, q store.Queue) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		WITH more AS (
			INSERT INTO ferry.queues (name) SELECT 'counted-' || g FROM generate_series(1, $2 / 64) AS g RETURNING id
		)
		INSERT INTO ferry.queue_counts (queue_id, slot, messages)
		SELECT id, slot, 1 FROM (SELECT id FROM more UNION ALL SELECT $1) q, generate_series(0, 63) AS slot
		ON CONFLICT (queue_id, slot) DO UPDATE SET messages = ferry.queue_counts.messages + 1`, q.ID, planBacklog)
	require.NoError(t, err)
}

// seedMessages inserts a few visible messages of q (a group of two and an
// ungrouped one) with the given receive_count, sent sentAgo seconds ago,
// for the warm-up on empty tables.
func seedMessages(t *testing.T, e *env, q store.Queue, receiveCount, sentAgo int) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, receive_count, sent_at, grp, body)
		SELECT $1, nextval('ferry.message_id_seq'), now() - interval '1 second', w, $2,
			now() - $3 * interval '1 second', g, '{}'
		FROM (VALUES ('warm', false), ('warm', true), (NULL, false)) AS v(g, w)`, q.ID, receiveCount, sentAgo)
	require.NoError(t, err)
}

// seedDeadLetters inserts a few dead letters of q (a group of two and an
// ungrouped one), dead-lettered deadAgo seconds ago, for the warm-up on
// empty tables.
func seedDeadLetters(t *testing.T, e *env, q store.Queue, deadAgo int) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		INSERT INTO ferry.dead_letters (queue_id, id, sent_at, dead_lettered_at, receive_count, grp,
			event_id, event_partition, event_offset, body)
		SELECT $1, id, now(), now() - $2 * interval '1 second', 5, g, 'e' || id, 0, id, '{}'
		FROM (SELECT nextval('ferry.message_id_seq') AS id, g FROM (VALUES ('warm'), ('warm'), (NULL)) AS v(g)) d`,
		q.ID, deadAgo)
	require.NoError(t, err)
}

// seedExpiredDedup inserts a few dedup ids of q whose window has ended.
func seedExpiredDedup(t *testing.T, e *env, q store.Queue) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		INSERT INTO ferry.dedup (queue_id, dedup_id, message_id, expires_at)
		SELECT $1, 'warm-' || id, id, now() - interval '1 minute'
		FROM (SELECT nextval('ferry.message_id_seq') AS id FROM generate_series(1, 3)) d`, q.ID)
	require.NoError(t, err)
}

// claimedOrSeeded claims up to 100 of q's messages on the plain pool and
// returns their receipts; when there is nothing to claim (the warm-up on
// empty tables) it first sends a few, grouped or not.
func claimedOrSeeded(t *testing.T, e *env, q store.Queue, withGroups bool) []store.Receipt {
	t.Helper()
	msgs := e.claim(q, 100, time.Minute)
	if len(msgs) == 0 {
		if withGroups {
			e.send(q, grouped("warm-a", 1), grouped("warm-a", 2), grouped("warm-b", 1), msg(1))
		} else {
			e.send(q, msg(1), msg(2), msg(3))
		}
		msgs = e.claim(q, 100, time.Minute)
	}
	require.NotEmpty(t, msgs)
	return receipts(msgs)
}

// leaseAll puts every message of q in flight, as claims with the given
// lease would: all in the ring slot of now + lease, each with a claim
// token of its own.
func (e *env) leaseAll(q store.Queue, lease time.Duration) {
	e.t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		UPDATE ferry.messages SET visible_at = l.at, part = ferry.message_part(l.at, now()),
			receive_count = receive_count + 1, claim_token = ferry.claim_token(ferry.message_part(l.at, now()), grp IS NOT NULL)
		FROM (SELECT now() + $2 * interval '1 millisecond' AS at) l
		WHERE queue_id = $1`, q.ID, lease.Milliseconds())
	require.NoError(e.t, err)
}

// inFlight is the receipts of up to n of q's messages in flight, oldest
// first.
func (e *env) inFlight(q store.Queue, n int) []store.Receipt {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, `
		SELECT id, claim_token FROM ferry.messages WHERE queue_id = $1 AND claim_token IS NOT NULL ORDER BY id LIMIT $2`, q.ID, n)
	require.NoError(e.t, err)
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Receipt, error) {
		var rc store.Receipt
		return rc, r.Scan(&rc.MessageID, &rc.Token)
	})
	require.NoError(e.t, err)
	return rs
}

// rewriting is the bound of a batch whose every item is a probe, a row
// lock and an UPDATE of an indexed column (visible_at: not a HOT update),
// which writes new entries in the primary key, the claim index and, for
// grouped messages, the group index: 20-24 buffers an item measured, which
// the default of 20 leaves too little room for.
func rewriting(batch int) workBound {
	return workBound{Batch: batch, BuffersPerRow: 30}
}

// promoting is the bound of a batch whose every item also promotes the
// next message of its group: besides the item's own probe and write, a
// probe for the next message, one for a remaining head, and an UPDATE that
// writes new entries in three indexes (about 30 buffers an item, all of
// them probes).
func promoting(batch int) workBound {
	return workBound{Batch: batch, BuffersPerRow: 40}
}

// deadLettering is b for an operation that dead-letters: its statement
// calls ferry.message_dead_letter_queue and message_dead_letter_put, whose
// statements a session plans at its first call, inside the statement
// (the catalog reads count in its buffers): a fixed cost.
func deadLettering(b workBound) workBound {
	b.BuffersFixed = 600
	return b
}

// promotes is b for an operation that removes group heads: the probe must
// also have seen (and checked) the promotion's own statement, which runs
// inside ferry.message_promote.
func promotes(b workBound) workBound {
	b.Seen = append(b.Seen, "ferry:message_promote")
	return b
}

func requireAllOK(t *testing.T, res []store.ReceiptResult) {
	t.Helper()
	for _, r := range res {
		require.True(t, r.OK, "receipt %v", r.Receipt)
	}
}

// hundredPlain is a batch of 100 messages with no group or dedup id.
func hundredPlain(int) []store.SendMessage {
	var msgs []store.SendMessage
	for i := range 100 {
		msgs = append(msgs, msg(i))
	}
	return msgs
}

// halfBusyGroups is a batch of 100 grouped messages: half to fillGroups'
// groups with live messages (the big one among them), half to groups new
// to run.
func halfBusyGroups(run int) []store.SendMessage {
	msgs := []store.SendMessage{grouped("big", 0)}
	for i := 1; i < 50; i++ {
		msgs = append(msgs, grouped(fmt.Sprintf("g%d", i), i))
	}
	for i := range 50 {
		msgs = append(msgs, grouped(fmt.Sprintf("new-%d-%d", run, i), i))
	}
	return msgs
}

// sendBatchJSON is msgs as the REST (and ferry.send_batch) messages array.
func sendBatchJSON(t *testing.T, msgs []store.SendMessage) string {
	t.Helper()
	type item struct {
		Body    json.RawMessage `json:"body"`
		Group   string          `json:"group,omitempty"`
		DedupID string          `json:"dedup_id,omitempty"`
	}
	items := make([]item, len(msgs))
	for i, m := range msgs {
		items[i] = item{Body: m.Body, Group: m.Group, DedupID: m.DedupID}
	}
	raw, err := json.Marshal(items)
	require.NoError(t, err)
	return string(raw)
}

// halfLiveDedup is a batch of 100 sends whose dedup ids are half live in
// fillDedup's rows and half new to run.
func halfLiveDedup(run int) []store.SendMessage {
	var msgs []store.SendMessage
	for i := range 100 {
		m := msg(i)
		m.DedupID = fmt.Sprintf("live-%d", i)
		if i%2 == 1 {
			m.DedupID = fmt.Sprintf("new-%d-%d", run, i)
		}
		msgs = append(msgs, m)
	}
	return msgs
}
