package jobs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/store"
)

// Deleting a queue inserts its cleanup job in the same transaction; the job
// removes every row the queue had.
func TestQueueCleanupJob(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	q, _, err := store.QueueUpsert(ctx, pool, "doomed", store.QueuePatch{})
	require.NoError(t, err)
	send(t, pool, "doomed", 300)

	awaitJob(t, client, (jobs.QueueCleanupArgs{}).Kind(), func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id, err := store.QueueDelete(ctx, tx, "doomed")
			if err != nil {
				return err
			}
			return jobs.InsertQueueCleanup(ctx, client, tx, id)
		})
	})

	for _, table := range []string{"ferry.messages", "ferry.dead_letters", "ferry.dedup", "ferry.queue_counts"} {
		require.Zero(t, count(t, pool, `SELECT count(*) FROM `+table+` WHERE queue_id = $1`, q.ID), table)
	}
}

// Deleting a topic inserts its cleanup job in the same transaction; the job
// removes every row the topic had, across several of its bounded batches
// (more events than one batch), and nothing of other topics.
func TestTopicCleanupJob(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	tp := upsertTopic(t, pool, "doomed", store.TopicPatch{})
	other := upsertTopic(t, pool, "other", store.TopicPatch{})
	publishN(t, pool, tp, "e", 6200)
	publishN(t, pool, other, "e", 10)

	awaitJob(t, client, (jobs.TopicCleanupArgs{}).Kind(), func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id, _, err := store.TopicDelete(ctx, tx, "doomed")
			if err != nil {
				return err
			}
			return jobs.InsertTopicCleanup(ctx, client, tx, id)
		})
	})

	for _, table := range []string{"ferry.events", "ferry.event_dedup", "ferry.topic_partitions"} {
		require.Zero(t, count(t, pool, `SELECT count(*) FROM `+table+` WHERE topic_id = $1`, tp.ID), table)
	}
	require.Equal(t, 10, count(t, pool, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, other.ID))
	require.Equal(t, 10, count(t, pool, `SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1`, other.ID))
	require.Equal(t, 4, count(t, pool, `SELECT count(*) FROM ferry.topic_partitions WHERE topic_id = $1`, other.ID))
}

// A cleanup job inserted with a delete that rolls back never runs against
// the live topic: nothing is deleted.
func TestTopicCleanupJobRolledBack(t *testing.T) {
	t.Parallel()
	pool, client := setup(t)
	ctx := context.Background()
	tp := upsertTopic(t, pool, "kept", store.TopicPatch{})
	publishN(t, pool, tp, "e", 20)
	errRollback := errors.New("roll back")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		id, _, err := store.TopicDelete(ctx, tx, "kept")
		if err != nil {
			return err
		}
		if err := jobs.InsertTopicCleanup(ctx, client, tx, id); err != nil {
			return err
		}
		return errRollback
	})
	require.ErrorIs(t, err, errRollback)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1`, (jobs.TopicCleanupArgs{}).Kind()))
	require.Equal(t, 20, count(t, pool, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
	_, err = store.TopicGet(ctx, pool, "kept")
	require.NoError(t, err)
}
