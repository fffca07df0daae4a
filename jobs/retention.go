package jobs

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferry-mq/ferry/store"
)

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
