package store_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestPlansRing attacks the claim and the settles where ferry.messages'
// partitions differ (store/doc.go, # Held snapshots): a backlog forwarded
// to COLD with more of it in a ring slot, and leases swept in from FAR,
// under every planHistory (forced generic plans made on empty tables
// among them, autovacuum off): each statement stays proportional to its
// batch whichever partitions the planner believes empty.
func TestPlansRing(t *testing.T) {
	t.Parallel()
	newQueue := func(t *testing.T, e *env) *planFixture {
		return &planFixture{Queue: e.queue("plan-ring", store.QueuePatch{})}
	}
	// Half the backlog forwarded to COLD, the other half sent after it,
	// in the slot of now.
	coldAndSlot := func(t *testing.T, e *env, f *planFixture) {
		fillQueue(t, e, f.Queue, planBacklog/2)
		e.forwardAll()
		fillQueue(t, e, f.Queue, planBacklog/2)
	}
	runPlanCases(t, []planCase{
		{
			name:  "claim_cold_and_slot",
			setup: newQueue,
			fill:  coldAndSlot,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, _, err := store.MessageClaim(e.ctx, db, store.ClaimParams{Queue: f.Queue, Max: 100, VisibilityTimeout: time.Minute})
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
		{
			// Leases of an hour (in FAR), then acked: each ack finds its
			// row by one probe per partition.
			name:  "ack_far_leases",
			setup: newQueue,
			fill:  coldAndSlot,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				msgs, _, err := store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: f.Queue, Max: 100, VisibilityTimeout: time.Hour})
				require.NoError(t, err)
				_, _, err = store.MessageAck(e.ctx, db, f.Queue.ID, each(msgs, func(m store.Message) store.Receipt { return m.Receipt }))
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
	})
}

// forwardAll moves every ring slot's rows to COLD.
func (e *env) forwardAll() {
	e.t.Helper()
	shape, now, err := store.RingShapeGet(e.ctx, e.pool)
	require.NoError(e.t, err)
	for s := range shape.Slots {
		for {
			n, err := store.RingForward(e.ctx, e.pool, s, now.Add(24*time.Hour), 10000)
			require.NoError(e.t, err)
			if n == 0 {
				break
			}
		}
	}
}
