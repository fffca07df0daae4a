package jobs

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferry-mq/ferry/store"
)

// QueueCleanupArgs: delete what a deleted queue left behind. Inserted in
// the transaction that deletes the queue; also found by the periodic
// orphan sweep if that insert was ever lost.
type QueueCleanupArgs struct {
	QueueID int64 `json:"queue_id"`
}

// Kind implements river.JobArgs.
func (QueueCleanupArgs) Kind() string { return "ferry_queue_cleanup" }

// deleteContent deletes one bounded batch of the queue's rows.
func (a QueueCleanupArgs) deleteContent(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	return store.QueueDeleteContent(ctx, pool, a.QueueID, batch)
}

// InsertQueueCleanup schedules the cleanup of a deleted queue in tx.
func InsertQueueCleanup(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, queueID int64) error {
	return insertCleanup(ctx, client, tx, QueueCleanupArgs{QueueID: queueID}, "queue")
}

// TopicCleanupArgs: delete what a deleted topic left behind. Inserted in
// the transaction that deletes the topic.
type TopicCleanupArgs struct {
	TopicID int64 `json:"topic_id"`
}

// Kind implements river.JobArgs.
func (TopicCleanupArgs) Kind() string { return "ferry_topic_cleanup" }

// deleteContent deletes one bounded batch of the topic's events and dedup
// ids.
func (a TopicCleanupArgs) deleteContent(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	return store.TopicDeleteContent(ctx, pool, a.TopicID, batch)
}

// InsertTopicCleanup schedules the cleanup of a deleted topic in tx.
func InsertTopicCleanup(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, topicID int64) error {
	return insertCleanup(ctx, client, tx, TopicCleanupArgs{TopicID: topicID}, "topic")
}

// cleanupArgs are the arguments of a cleanup job: what a deleted queue or
// topic left behind, deleted one bounded batch at a time.
type cleanupArgs interface {
	river.JobArgs
	deleteContent(ctx context.Context, pool *pgxpool.Pool) (int64, error)
}

// cleanupWorker runs a cleanup job (QueueCleanupArgs, TopicCleanupArgs).
type cleanupWorker[A cleanupArgs] struct {
	river.WorkerDefaults[A]
	Pool *pgxpool.Pool
}

// Work deletes the job's rows in bounded batches until none is left. If
// the job's time runs out first, River retries it and the next run goes
// on where this one stopped.
func (w *cleanupWorker[A]) Work(ctx context.Context, job *river.Job[A]) error {
	return cleanUp(ctx, w.Pool, job.Args)
}

// cleanUp deletes what args names, one bounded batch at a time, until a
// batch deletes nothing or ctx ends.
func cleanUp(ctx context.Context, pool *pgxpool.Pool, args cleanupArgs) error {
	for {
		n, err := args.deleteContent(ctx, pool)
		if err != nil || n == 0 {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func insertCleanup(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, args cleanupArgs, what string) error {
	if _, err := client.InsertTx(ctx, tx, args, nil); err != nil {
		return fmt.Errorf("insert %s cleanup job: %w", what, err)
	}
	return nil
}

// OrphanSweepArgs: find content of deleted queues with no cleanup done.
type OrphanSweepArgs struct{}

// Kind implements river.JobArgs.
func (OrphanSweepArgs) Kind() string { return "ferry_orphan_sweep" }

// OrphanSweepWorker runs [OrphanSweepArgs].
type OrphanSweepWorker struct {
	river.WorkerDefaults[OrphanSweepArgs]
	Pool *pgxpool.Pool
}

// Work cleans up to a few orphaned queues per run.
func (w *OrphanSweepWorker) Work(ctx context.Context, _ *river.Job[OrphanSweepArgs]) error {
	ids, err := store.QueueOrphans(ctx, w.Pool, 10)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := cleanUp(ctx, w.Pool, QueueCleanupArgs{QueueID: id}); err != nil {
			return err
		}
	}
	return nil
}
