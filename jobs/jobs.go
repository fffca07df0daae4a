// Package jobs holds the River jobs the server runs by itself: retention,
// dedup expiry, cleaning up deleted queues and topics, and the orphan sweep
// (periodic jobs run on River's elected leader only, so several Ferry
// instances on one database do each sweep once). Push delivery does not run
// on River: it is [github.com/ferry-mq/ferry/internal/push].
package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferry-mq/ferry/store"
)

// batch bounds the rows one statement of a sweep deletes, so no sweep
// holds locks or bloats tables with one huge DELETE.
const batch = 5000

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
		ringRotator(RingEvery, pool, log),
	)
}

// RingEvery is the period of the message ring's rotator: a fifth of a
// slot's window (store/doc.go, # Held snapshots). After a pass that did
// nothing and found the slots' storage as the last one did, the next
// waits: 5 s, doubled after each further such pass, at most
// RingIdleEvery, and RingIdleEvery at once when no slot has storage at
// all. So an idle rotator commits a few read-only statements a minute
// (DESIGN.md invariant 12). Under traffic the storage grows between
// passes, and the rotator keeps its period: a slot may be truncated only
// in the half minute between its last live row going and its window
// coming round again, and passes 5 s or more apart missed that (behind a
// held snapshot, the slot then kept its dead rows for another round).
//
// A slot that a pass found busy (its lock not granted within the wait,
// store.RingNextWait) is tried again the next second with twice the wait;
// after one busy at the longest wait, truncation rests for RingCalm, so
// that a transaction holding the ring for long (an application's, in the
// SQL API) stalls Ferry's statements for at most store.RingWaitMax each
// RingCalm.

const (
	RingEvery     = time.Second
	RingIdleEvery = time.Minute
	RingCalm      = 5 * time.Second
)

// ringRotator runs a pass of the message ring's rotator (store.RingRotate)
// every period on River's leader, and so on one instance at a time, and
// then, when the pass saw some, the fold of the SQL API transactions'
// counter rows (store.QueueCountsFold; a pass after a fold comes within
// the second). It
// inserts no job: the pass runs in the periodic job's constructor, which
// River calls only on the leader, and returns none, so an idle pass is a
// few reads and writes nothing (DESIGN.md invariant 12). A pass is
// bounded (store's ringBatches), and a failed one is logged and left to
// the next: nothing depends on it for correctness.
func ringRotator(every time.Duration, pool *pgxpool.Pool, log *slog.Logger) *river.PeriodicJob {
	var (
		next time.Time // River calls the constructor from one goroutine
		idle time.Duration
		wait = store.RingWaitMin // the truncation's wait for a slot's lock
		calm time.Time           // no truncation until then
		foot int64               // the last pass's store.RingPass.Footprint
	)
	return river.NewPeriodicJob(river.PeriodicInterval(every), func() (river.JobArgs, *river.InsertOpts) {
		if time.Now().Before(next) {
			return nil, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w := wait
		if time.Now().Before(calm) {
			w = 0
		}
		p, err := store.RingRotate(ctx, pool, w)
		var folded int64
		if p.CountsToFold {
			var ferr error
			if folded, ferr = store.QueueCountsFold(ctx, pool, 10); ferr != nil {
				log.Warn("counter fold failed; the next pass tries again", "error", ferr)
			}
		}
		if w > 0 && err == nil {
			busy := len(p.Busy) > 0
			if busy && w >= store.RingWaitMax {
				calm = time.Now().Add(RingCalm)
			}
			wait = store.RingNextWait(w, busy)
		}
		moved := p.Footprint != foot
		foot = p.Footprint
		switch {
		case err != nil || !p.Idle() || len(p.Busy) > 0 || p.Blocked > 0 || moved || folded > 0:
			next, idle = time.Time{}, 0
		case p.Stored == 0:
			next, idle = time.Now().Add(RingIdleEvery), 0
		default:
			idle = min(max(2*idle, 5*time.Second), RingIdleEvery)
			next = time.Now().Add(idle)
		}
		if err != nil {
			log.Warn("message ring rotation failed; the next pass tries again", "error", err)
		} else if p.Swept+p.Forwarded > 0 || len(p.Truncated)+len(p.Busy) > 0 || p.Blocked > 0 {
			log.Debug("message ring rotated", "swept", p.Swept, "forwarded", p.Forwarded, "truncated", p.Truncated,
				"busy", p.Busy, "blocked", p.Blocked, "wait", w)
		}
		return nil, nil
	}, &river.PeriodicJobOpts{RunOnStart: true})
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
