package store_test

import (
	"testing"
	"time"

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
	})
}
