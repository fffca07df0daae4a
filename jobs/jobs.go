// Package jobs holds the River jobs the server runs by itself: retention,
// dedup expiry, cleaning up deleted queues and topics, and the orphan sweep
// (periodic jobs run on River's elected leader only, so several Ferry
// instances on one database do each sweep once). Push delivery does not run
// on River: it is [github.com/ferry-mq/ferry/internal/push].
package jobs

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferry-mq/ferry/store"
)

// batch bounds the rows one statement of a sweep deletes, so no sweep
// holds locks or bloats tables with one huge DELETE.
const batch = 5000

// RetentionArgs: the periodic sweep of everything that expires by time:
// messages past their queue's retention (a subscription's pending
// deliveries past its), dead letters dead for longer than it, events past
// their topic's, dedup ids (of messages and of events) whose window has
// ended, old push attempts and old audit log entries. One job does all of it, so an idle minute
// costs River one job, and a sweep that finds nothing writes nothing of
// Ferry's own (DESIGN.md invariant 12).
type RetentionArgs struct{}

// Kind implements river.JobArgs.
func (RetentionArgs) Kind() string { return "ferry_retention" }

// RetentionWorker runs [RetentionArgs].
type RetentionWorker struct {
	river.WorkerDefaults[RetentionArgs]
	Pool *pgxpool.Pool
	// AttemptRetention is how long push attempts are kept.
	AttemptRetention time.Duration
	// AuditRetention is how long audit log entries are kept (default 90
	// days).
	AuditRetention time.Duration
	// Log gets one warning per run for every queue or subscription that
	// lost messages, deliveries or dead letters to retention: they were
	// never consumed, which someone should hear about.
	Log *slog.Logger
	// Observe, if set, is told every batch of such removals (it counts
	// them in ferry_expired_total).
	Observe func(store.Expiry)
}

// Work deletes expired rows in bounded batches until none are left or the
// job's time is up (the next run continues), then reports what expired.
func (w *RetentionWorker) Work(ctx context.Context, _ *river.Job[RetentionArgs]) error {
	lost := map[int64]*store.Expiry{}
	defer w.report(lost)
	for ctx.Err() == nil {
		x, err := store.MessageExpire(ctx, w.Pool, batch)
		w.observe(lost, x)
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
		d, err := store.DedupExpire(ctx, w.Pool, batch)
		if err != nil {
			return err
		}
		ed, err := store.EventDedupExpire(ctx, w.Pool, batch)
		if err != nil {
			return err
		}
		au, err := store.AuditExpire(ctx, w.Pool, cmp.Or(w.AuditRetention, DefaultAuditRetention), batch)
		if err != nil {
			return err
		}
		if x.Total() == 0 && e == 0 && a < batch && d < batch && ed < batch && au < batch {
			return nil
		}
	}
	return nil
}

// observe counts a batch's removals and adds them to the run's totals.
func (w *RetentionWorker) observe(lost map[int64]*store.Expiry, x store.Expired) {
	for _, e := range x {
		if w.Observe != nil {
			w.Observe(e)
		}
		t, ok := lost[e.QueueID]
		if !ok {
			t = &store.Expiry{QueueID: e.QueueID, Name: e.Name, Topic: e.Topic}
			lost[e.QueueID] = t
		}
		t.Messages += e.Messages
		t.DeadLetters += e.DeadLetters
	}
}

// report logs the run's removals, one line per queue or subscription.
func (w *RetentionWorker) report(lost map[int64]*store.Expiry) {
	if w.Log == nil {
		return
	}
	ids := slices.Sorted(maps.Keys(lost))
	for _, id := range ids {
		x := lost[id]
		if x.Topic == "" {
			w.Log.Warn("retention removed unconsumed messages", "queue", x.Name,
				"messages", x.Messages, "dead_letters", x.DeadLetters)
			continue
		}
		w.Log.Warn("retention removed unconsumed deliveries", "topic", x.Topic, "subscription", x.Name,
			"deliveries", x.Messages, "dead_letters", x.DeadLetters)
	}
}

// DedupExpiryArgs: forget dedup ids (of messages and of events) whose
// window has ended. The retention sweep does this too, and is what runs
// periodically; the job stays registered for jobs inserted by earlier
// versions, and for a sweep of dedup ids alone.
type DedupExpiryArgs struct{}

// Kind implements river.JobArgs.
func (DedupExpiryArgs) Kind() string { return "ferry_dedup_expiry" }

// DedupExpiryWorker runs [DedupExpiryArgs].
type DedupExpiryWorker struct {
	river.WorkerDefaults[DedupExpiryArgs]
	Pool *pgxpool.Pool
}

// Work deletes expired dedup ids in bounded batches.
func (w *DedupExpiryWorker) Work(ctx context.Context, _ *river.Job[DedupExpiryArgs]) error {
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

// Config sets the period of the sweeps and what they report to.
type Config struct {
	// RetentionEvery is the period of the retention sweep (default 1
	// minute).
	RetentionEvery time.Duration
	// Log receives the sweeps' warnings (default: discarded).
	Log *slog.Logger
	// ObserveExpired, if set, is told what retention removed that was
	// never consumed.
	ObserveExpired func(store.Expiry)
	// AttemptRetention is how long push attempts are kept (default 3 days).
	AttemptRetention time.Duration
	// AuditRetention is how long audit log entries are kept (default
	// DefaultAuditRetention).
	AuditRetention time.Duration
}

// DefaultAuditRetention is how long audit log entries are kept unless
// configured otherwise (FERRY_AUDIT_RETENTION): 90 days.
const DefaultAuditRetention = 90 * 24 * time.Hour

// Register adds Ferry's workers and periodic jobs to a River config.
func Register(cfg *river.Config, pool *pgxpool.Pool, every Config) {
	if every.RetentionEvery <= 0 {
		every.RetentionEvery = time.Minute
	}
	workers := river.NewWorkers()
	if every.AttemptRetention <= 0 {
		every.AttemptRetention = 72 * time.Hour
	}
	if every.AuditRetention <= 0 {
		every.AuditRetention = DefaultAuditRetention
	}
	river.AddWorker(workers, &RetentionWorker{
		Pool: pool, AttemptRetention: every.AttemptRetention, AuditRetention: every.AuditRetention,
		Log: every.Log, Observe: every.ObserveExpired,
	})
	river.AddWorker(workers, &DedupExpiryWorker{Pool: pool})
	river.AddWorker(workers, &cleanupWorker[QueueCleanupArgs]{Pool: pool})
	river.AddWorker(workers, &OrphanSweepWorker{Pool: pool})
	river.AddWorker(workers, &cleanupWorker[TopicCleanupArgs]{Pool: pool})
	cfg.Workers = workers
	log := every.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.PeriodicJobs = append(cfg.PeriodicJobs,
		whenDue(every.RetentionEvery, RetentionArgs{}, log, func(ctx context.Context) (bool, error) {
			return store.RetentionDue(ctx, pool, store.RetentionKeep{PushAttempts: every.AttemptRetention, Audit: every.AuditRetention})
		}),
		whenDue(time.Hour, OrphanSweepArgs{}, log, func(ctx context.Context) (bool, error) {
			ids, err := store.QueueOrphans(ctx, pool, 1)
			return len(ids) > 0, err
		}),
	)
}

// whenDue is a periodic job that River's leader inserts only when due says
// there is work: an idle sweep is one read on the leader and writes no job
// row (DESIGN.md invariant 12). If due fails, the job is inserted anyway
// and reports its own failure.
func whenDue(every time.Duration, args river.JobArgs, log *slog.Logger, due func(context.Context) (bool, error)) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(every), func() (river.JobArgs, *river.InsertOpts) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ok, err := due(ctx)
		if err != nil {
			log.Warn("check for due work failed; running the job anyway", "kind", args.Kind(), "error", err)
			return args, nil
		}
		if !ok {
			log.Debug("nothing due; no job inserted", "kind", args.Kind())
			return nil, nil
		}
		return args, nil
	}, &river.PeriodicJobOpts{RunOnStart: true})
}
