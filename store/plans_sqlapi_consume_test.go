package store_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestPlansSQLConsume attacks the SQL API's consumers (ferry.receive,
// ferry.ack, ferry.nack, ferry.extend) as an application calls them: their
// own statements (the target's lookup, the receipts' decoding, the
// results) and the engine's statements they run must each do work
// proportional to the batch, under every planHistory, like the store's
// calls of the same engine (TestPlansQueue, TestPlansQueueSettle).
func TestPlansSQLConsume(t *testing.T) {
	t.Parallel()
	newQueue := func(t *testing.T, e *env) *planFixture {
		return &planFixture{Queue: e.queue("plan-queue", store.QueuePatch{})}
	}
	groups := func(t *testing.T, e *env, f *planFixture) { fillGroups(t, e, f.Queue, 0, 0) }
	plain := func(t *testing.T, e *env, f *planFixture) { fillQueue(t, e, f.Queue, planBacklog) }
	settle := func(sql string, withGroups bool, bound func(n int) workBound) func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
		return func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
			rs := each(claimedOrSeeded(t, e, f.Queue, withGroups), store.Receipt.String)
			var ok int
			require.NoError(t, db.QueryRow(e.ctx, sql, f.Queue.Name, rs).Scan(&ok))
			require.Equal(t, len(rs), ok, "every receipt applied")
			return bound(len(rs))
		}
	}
	plainBound := func(n int) workBound { return workBound{Batch: n} }
	runPlanCases(t, []planCase{
		{
			name:  "sql_receive",
			setup: newQueue,
			fill:  plain,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				var n int
				require.NoError(t, db.QueryRow(e.ctx, `SELECT count(*) FROM ferry.receive($1, 100, 60)`, f.Queue.Name).Scan(&n))
				return workBound{Batch: 100}
			},
		},
		{
			name:  "sql_receive_dead_letter",
			setup: newQueue,
			fill:  func(t *testing.T, e *env, f *planFixture) { fillGroups(t, e, f.Queue, f.Queue.MaxReceives, 0) },
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				if e.live(f.Queue) == 0 {
					seedMessages(t, e, f.Queue, f.Queue.MaxReceives, 0)
				}
				var n int
				require.NoError(t, db.QueryRow(e.ctx, `SELECT count(*) FROM ferry.receive($1, 100, 60)`, f.Queue.Name).Scan(&n))
				require.Zero(t, n)
				return deadLettering(promotes(promoting(100)))
			},
		},
		{
			name: "sql_ack", setup: newQueue, fill: groups,
			run: settle(`SELECT count(*) FILTER (WHERE status = 'ok') FROM ferry.ack($1, $2)`, true, func(n int) workBound { return promotes(promoting(n)) }),
		},
		{
			name: "sql_nack_release", setup: newQueue, fill: groups,
			run: settle(`SELECT count(*) FILTER (WHERE status = 'ok') FROM ferry.nack($1, $2, '{"delay_seconds": 3600}')`, true, rewriting),
		},
		{
			name: "sql_nack_dead_letter", setup: newQueue, fill: groups,
			run: settle(`SELECT count(*) FILTER (WHERE status = 'ok') FROM ferry.nack($1, $2, '{"dead_letter": true}')`, true, func(n int) workBound { return deadLettering(promotes(promoting(n))) }),
		},
		{
			name: "sql_extend", setup: newQueue, fill: plain,
			run: settle(`SELECT count(*) FILTER (WHERE status = 'ok') FROM ferry.extend($1, $2, 3600)`, false, plainBound),
		},
	})
}
