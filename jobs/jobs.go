// Package jobs holds what the server does by itself: River workers for
// retention, dedup expiry and cleaning up deleted queues (periodic jobs run
// on River's elected leader only, so several Ferry instances on one
// database do each sweep once), and push delivery (push.go: workers of its
// own, one instance per target by a lease).
package jobs

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferry-mq/ferry/store"
)

// batch bounds the rows one statement of a sweep deletes, so no sweep
// holds locks or bloats tables with one huge DELETE.
const batch = 5000

// RetentionArgs: delete messages past their queue's retention, dead
// letters dead for longer than it, and events past their topic's.
type RetentionArgs struct{}

// Kind implements river.JobArgs.
func (RetentionArgs) Kind() string { return "ferry_retention" }

// RetentionWorker runs RetentionArgs.
type RetentionWorker struct {
	river.WorkerDefaults[RetentionArgs]
	Pool *pgxpool.Pool
	// AttemptRetention is how long push attempts are kept.
	AttemptRetention time.Duration
}

// Work deletes expired rows in bounded batches until none are left or the
// job's time is up (the next run continues).
func (w *RetentionWorker) Work(ctx context.Context, job *river.Job[RetentionArgs]) error {
	for ctx.Err() == nil {
		n, err := store.MessageExpire(ctx, w.Pool, batch)
		if err != nil {
			return err
		}
		e, err := store.EventExpire(ctx, w.Pool, batch)
		if err != nil {
			return err
		}
		a, err := store.PushAttemptExpire(ctx, w.Pool, cmp.Or(w.AttemptRetention, 72*time.Hour), batch)
		if err != nil {
			return err
		}
		if n == 0 && e == 0 && a < batch {
			return nil
		}
	}
	return nil
}

// DedupExpiryArgs: forget dedup ids (of messages and of events) whose
// window has ended.
type DedupExpiryArgs struct{}

// Kind implements river.JobArgs.
func (DedupExpiryArgs) Kind() string { return "ferry_dedup_expiry" }

// DedupExpiryWorker runs DedupExpiryArgs.
type DedupExpiryWorker struct {
	river.WorkerDefaults[DedupExpiryArgs]
	Pool *pgxpool.Pool
}

// Work deletes expired dedup ids in bounded batches.
func (w *DedupExpiryWorker) Work(ctx context.Context, job *river.Job[DedupExpiryArgs]) error {
	for ctx.Err() == nil {
		n, err := store.DedupExpire(ctx, w.Pool, batch)
		if err != nil {
			return err
		}
		e, err := store.EventDedupExpire(ctx, w.Pool, batch)
		if err != nil {
			return err
		}
		if n < batch && e < batch {
			return nil
		}
	}
	return nil
}

// QueueCleanupArgs: delete what a deleted queue left behind. Inserted in
// the transaction that deletes the queue; also found by the periodic
// orphan sweep if that insert was ever lost.
type QueueCleanupArgs struct {
	QueueID int64 `json:"queue_id"`
}

// Kind implements river.JobArgs.
func (QueueCleanupArgs) Kind() string { return "ferry_queue_cleanup" }

// QueueCleanupWorker runs QueueCleanupArgs.
type QueueCleanupWorker struct {
	river.WorkerDefaults[QueueCleanupArgs]
	Pool *pgxpool.Pool
}

// Work deletes the queue's rows in bounded batches.
func (w *QueueCleanupWorker) Work(ctx context.Context, job *river.Job[QueueCleanupArgs]) error {
	return untilEmpty(ctx, func() (int64, error) {
		return store.QueueDeleteContent(ctx, w.Pool, job.Args.QueueID, batch)
	})
}

// untilEmpty calls step, one bounded batch at a time, until it deletes
// nothing. If the job's time runs out first, River retries it and the next
// run goes on where this one stopped.
func untilEmpty(ctx context.Context, step func() (int64, error)) error {
	for {
		n, err := step()
		if err != nil || n == 0 {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// InsertQueueCleanup schedules the cleanup of a deleted queue in tx.
func InsertQueueCleanup(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, queueID int64) error {
	if _, err := client.InsertTx(ctx, tx, QueueCleanupArgs{QueueID: queueID}, nil); err != nil {
		return fmt.Errorf("insert queue cleanup job: %w", err)
	}
	return nil
}

// TopicCleanupArgs: delete what a deleted topic left behind. Inserted in
// the transaction that deletes the topic.
type TopicCleanupArgs struct {
	TopicID int64 `json:"topic_id"`
}

// Kind implements river.JobArgs.
func (TopicCleanupArgs) Kind() string { return "ferry_topic_cleanup" }

// TopicCleanupWorker runs TopicCleanupArgs.
type TopicCleanupWorker struct {
	river.WorkerDefaults[TopicCleanupArgs]
	Pool *pgxpool.Pool
}

// Work deletes the topic's events and dedup ids in bounded batches.
func (w *TopicCleanupWorker) Work(ctx context.Context, job *river.Job[TopicCleanupArgs]) error {
	return untilEmpty(ctx, func() (int64, error) {
		return store.TopicDeleteContent(ctx, w.Pool, job.Args.TopicID, batch)
	})
}

// InsertTopicCleanup schedules the cleanup of a deleted topic in tx.
func InsertTopicCleanup(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, topicID int64) error {
	if _, err := client.InsertTx(ctx, tx, TopicCleanupArgs{TopicID: topicID}, nil); err != nil {
		return fmt.Errorf("insert topic cleanup job: %w", err)
	}
	return nil
}

// OrphanSweepArgs: find content of deleted queues with no cleanup done.
type OrphanSweepArgs struct{}

// Kind implements river.JobArgs.
func (OrphanSweepArgs) Kind() string { return "ferry_orphan_sweep" }

// OrphanSweepWorker runs OrphanSweepArgs.
type OrphanSweepWorker struct {
	river.WorkerDefaults[OrphanSweepArgs]
	Pool *pgxpool.Pool
}

// Work cleans up to a few orphaned queues per run.
func (w *OrphanSweepWorker) Work(ctx context.Context, job *river.Job[OrphanSweepArgs]) error {
	ids, err := store.QueueOrphans(ctx, w.Pool, 10)
	if err != nil {
		return err
	}
	for _, id := range ids {
		err := untilEmpty(ctx, func() (int64, error) { return store.QueueDeleteContent(ctx, w.Pool, id, batch) })
		if err != nil {
			return err
		}
	}
	return nil
}

// Config sets the periods of the sweeps.
type Config struct {
	RetentionEvery time.Duration
	DedupEvery     time.Duration
	// AttemptRetention is how long push attempts are kept (default 3 days).
	AttemptRetention time.Duration
}

// Register adds Ferry's workers and periodic jobs to a River config.
func Register(cfg *river.Config, pool *pgxpool.Pool, every Config) {
	if every.RetentionEvery <= 0 {
		every.RetentionEvery = time.Minute
	}
	if every.DedupEvery <= 0 {
		every.DedupEvery = time.Minute
	}
	workers := river.NewWorkers()
	if every.AttemptRetention <= 0 {
		every.AttemptRetention = 72 * time.Hour
	}
	river.AddWorker(workers, &RetentionWorker{Pool: pool, AttemptRetention: every.AttemptRetention})
	river.AddWorker(workers, &DedupExpiryWorker{Pool: pool})
	river.AddWorker(workers, &QueueCleanupWorker{Pool: pool})
	river.AddWorker(workers, &OrphanSweepWorker{Pool: pool})
	river.AddWorker(workers, &TopicCleanupWorker{Pool: pool})
	cfg.Workers = workers
	periodic := func(every time.Duration, args river.JobArgs) *river.PeriodicJob {
		return river.NewPeriodicJob(river.PeriodicInterval(every),
			func() (river.JobArgs, *river.InsertOpts) { return args, nil },
			&river.PeriodicJobOpts{RunOnStart: true})
	}
	cfg.PeriodicJobs = append(cfg.PeriodicJobs,
		periodic(every.RetentionEvery, RetentionArgs{}),
		periodic(every.DedupEvery, DedupExpiryArgs{}),
		periodic(time.Hour, OrphanSweepArgs{}),
	)
}
