package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// The rotator of ferry.messages' ring (package doc, # Held snapshots):
// the three steps as functions a test can call one at a time, and
// [RingRotate], one pass of all three, which the leader runs every
// second (jobs.Register).

// RingShape is the ring's shape as the definitions route rows
// (ferry.ring_shape): slots 0..Slots-1, then COLD (Slots) and FAR
// (Slots+1); a slot holds a window of Width of visible_at; rows due beyond
// Horizon go to FAR.
type RingShape struct {
	Slots   int
	Width   time.Duration
	Horizon time.Duration
}

// ringBatch bounds the rows one statement of the rotator moves.
const ringBatch = 1000

// ringBatches bounds the batches one step runs in one pass, so that a
// pass ends; what is left waits for the next.
const ringBatches = 20

// RingShapeGet reads the ring's shape and the database's clock.
func RingShapeGet(ctx context.Context, db DBTX) (RingShape, time.Time, error) {
	var (
		s         RingShape
		w, h      int
		clockTime time.Time
	)
	err := db.QueryRow(ctx, `/* ferry:ring_shape */ SELECT slots, width_s, horizon_s, clock_timestamp() FROM ferry.ring_shape()`).
		Scan(&s.Slots, &w, &h, &clockTime)
	if err != nil {
		return s, clockTime, interpretError("ring shape", err)
	}
	s.Width, s.Horizon = time.Duration(w)*time.Second, time.Duration(h)*time.Second
	return s, clockTime, nil
}

// window is the number of the window of t.
func (s RingShape) window(t time.Time) int64 {
	return int64(math.Floor(float64(t.UnixMicro()) / float64(s.Width.Microseconds())))
}

// start is when window w starts.
func (s RingShape) start(w int64) time.Time {
	return time.UnixMicro(w * s.Width.Microseconds())
}

// slotWindow is the window slot takes next at now: the newest window,
// up to two windows past the farthest one rows are routed to at now
// (now + Horizon), that maps to slot. Its rows of earlier windows must be
// forwarded before writes reach it.
func (s RingShape) slotWindow(slot int, now time.Time) int64 {
	e := s.window(now.Add(s.Horizon)) + 2
	n := int64(s.Slots)
	return e - ((e-int64(slot))%n+n)%n
}

// inUse reports whether slot's window is being written at now: from the
// current window to the farthest one rows are routed to.
func (s RingShape) inUse(slot int, now time.Time) bool {
	w := s.slotWindow(slot, now)
	return w >= s.window(now) && w <= s.window(now.Add(s.Horizon))
}

// RingForward moves up to limit rows of ring slot slot that are due
// before before to COLD (ferry.ring_forward: rows another transaction
// holds are skipped); it returns how many it moved.
func RingForward(ctx context.Context, db DBTX, slot int, before time.Time, limit int) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `/* ferry:ring_forward_call */ SELECT ferry.ring_forward($1, $2, $3)`, slot, before, limit).Scan(&n)
	return n, interpretError("ring forward", err)
}

// RingSweep moves up to limit rows of FAR due before until into their
// ring slots (ferry.ring_sweep); it returns how many it moved.
func RingSweep(ctx context.Context, db DBTX, until time.Time, limit int) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `/* ferry:ring_sweep_call */ SELECT ferry.ring_sweep($1, $2)`, until, limit).Scan(&n)
	return n, interpretError("ring sweep", err)
}

// RingTruncation is what [RingTruncate] did with a slot.
type RingTruncation string

const (
	RingTruncated RingTruncation = "truncated" // emptied: its storage freed
	RingLive      RingTruncation = "live"      // left: it holds a live row
	RingBusy      RingTruncation = "busy"      // left: its lock was not granted within the wait
)

// The truncation's wait for a slot's lock: every statement on
// ferry.messages queues behind a lock being awaited, so the wait starts
// at RingWaitMin and doubles, up to RingWaitMax, only while passes find
// slots busy (claims slow enough to outlast it), and returns to the
// minimum once one is granted ([RingNextWait]).
const (
	RingWaitMin = 20 * time.Millisecond
	RingWaitMax = 160 * time.Millisecond
)

// RingNextWait is the truncation's wait for the next pass, after a pass
// that waited wait and found some slot busy, or none.
func RingNextWait(wait time.Duration, busy bool) time.Duration {
	if !busy {
		return RingWaitMin
	}
	return min(max(2*wait, RingWaitMin), RingWaitMax)
}

// RingTruncate truncates ring slot slot if it holds no live row and no
// other transaction uses it for longer than wait (20 ms to 1 s;
// ferry.ring_truncate_within), in a transaction of its own.
func RingTruncate(ctx context.Context, db TxBeginner, slot int, wait time.Duration) (RingTruncation, error) {
	var got RingTruncation
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `/* ferry:ring_truncate_call */ SELECT ferry.ring_truncate_within($1, $2)`, slot, wait).Scan(&got)
	})
	return got, interpretError("ring truncate", err)
}

// RingSlotsStored lists the ring slots that have storage (a slot
// truncated since it was last written has none): the only ones a pass
// looks at, so that an idle ring costs one read and writes nothing.
func RingSlotsStored(ctx context.Context, db DBTX, shape RingShape) ([]int, error) {
	rows, err := db.Query(ctx, `/* ferry:ring_slots_stored */
		SELECT s FROM generate_series(0, $1 - 1) s
		WHERE pg_relation_size(format('ferry.messages_%s', lpad(s::text, 2, '0'))::regclass) > 0
		ORDER BY s`, shape.Slots)
	if err != nil {
		return nil, interpretError("ring slots", err)
	}
	slots, err := pgx.CollectRows(rows, pgx.RowTo[int])
	return slots, interpretError("ring slots", err)
}

// RingPass is what one [RingRotate] did.
type RingPass struct {
	Swept, Forwarded int64
	// Stored is how many ring slots had storage; Truncated, which of them
	// it truncated; Busy, which it left because their lock was not
	// granted within the wait.
	Stored          int
	Truncated, Busy []int
	// Footprint is the stored slots' storage, bytes, when the pass
	// began: while it changes, rows come and go, and a slot may empty
	// at any moment (jobs does not slow down then).
	Footprint int64
	// Blocked counts the forwards that met rows other transactions moved
	// or locked (serialization failures, lock timeouts): left for the
	// next pass, which does not keep this one from truncating.
	Blocked int
	// CountsToFold says that committed SQL API transactions left counter
	// rows for [QueueCountsFold] (the pass does not fold them).
	CountsToFold bool
}

// Idle reports whether the pass did nothing: nothing swept, forwarded
// or truncated.
func (p RingPass) Idle() bool { return p.Swept == 0 && p.Forwarded == 0 && len(p.Truncated) == 0 }

// ringSlot is what a pass reads of a stored ring slot.
type ringSlot struct {
	slot      int
	old, live bool  // rows to forward; any live row
	size      int64 // its storage, bytes
}

// ringState reads, in one statement, the ring's shape and the database's
// clock, whether FAR has rows due within the horizon less a window, and
// which ring slots have storage, with their size and, for a slot not in
// use (RingShape.inUse, computed here as there), whether it has rows due
// before the window it takes next (the start of RingShape.slotWindow)
// and any live row. A slot in use is neither forwarded nor truncated, so
// it is not read: behind a held snapshot each such read walks the slot's
// dead rows, and passes run every second under traffic. It also reads
// whether SQL API transactions left counter rows to fold (ferry.counts_fold),
// so that the rotator folds only when there are some.
func ringState(ctx context.Context, db DBTX) (RingShape, time.Time, bool, []ringSlot, bool, error) {
	var (
		shape  RingShape
		now    time.Time
		farDue bool
		counts bool
		slots  []ringSlot
	)
	rows, err := db.Query(ctx, `/* ferry:ring_state */
		WITH sh AS (
			SELECT r.slots, r.width_s, r.horizon_s, clock_timestamp() AS now,
				floor(extract(epoch FROM clock_timestamp()) / r.width_s + r.horizon_s::float8 / r.width_s)::bigint + 2 AS e,
				to_timestamp((floor(extract(epoch FROM clock_timestamp()) / r.width_s) * r.width_s)::float8) AS cur
			FROM ferry.ring_shape() r
		),
		sl AS (
			SELECT g.s::smallint AS slot, to_timestamp(((sh.e - ((sh.e - g.s) % sh.slots + sh.slots) % sh.slots) * sh.width_s)::float8) AS before
			FROM sh CROSS JOIN generate_series(0, sh.slots - 1) AS g(s)
		)
		SELECT -1, EXISTS (SELECT 1 FROM ferry.messages WHERE part = 17
				AND visible_at < sh.now + make_interval(secs => sh.horizon_s - sh.width_s)),
			EXISTS (SELECT 1 FROM ferry.queue_counts c WHERE c.slot < 0), sh.slots, sh.width_s, sh.horizon_s, sh.now
		FROM sh
		UNION ALL
		SELECT sl.slot,
			NOT sl.used AND EXISTS (SELECT 1 FROM ferry.messages m WHERE m.part = sl.slot AND m.visible_at < sl.before),
			NOT sl.used AND EXISTS (SELECT 1 FROM ferry.messages m WHERE m.part = sl.slot),
			sl.size, 0, 0, NULL
		FROM (
			SELECT sl.*, pg_relation_size(format('ferry.messages_%s', lpad(sl.slot::text, 2, '0'))::regclass) AS size,
				sl.before >= sh.cur AND sl.before <= sh.now + make_interval(secs => sh.horizon_s) AS used
			FROM sl CROSS JOIN sh
		) sl
		WHERE sl.size > 0`)
	if err != nil {
		return shape, now, false, nil, false, interpretError("ring state", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			rs   ringSlot
			n    int
			w, h int
			at   *time.Time
		)
		if err := rows.Scan(&rs.slot, &rs.old, &rs.live, &n, &w, &h, &at); err != nil {
			return shape, now, false, nil, false, interpretError("ring state", err)
		}
		if rs.slot < 0 {
			shape = RingShape{Slots: n, Width: time.Duration(w) * time.Second, Horizon: time.Duration(h) * time.Second}
			now, farDue, counts = *at, rs.old, rs.live
			continue
		}
		rs.size = int64(n)
		slots = append(slots, rs)
	}
	return shape, now, farDue, slots, counts, interpretError("ring state", rows.Err())
}

// RingRotate runs one pass of the rotator at the database's clock: the
// FAR sweep (rows due within the horizon less a window go to their
// slot), the forward of every stored slot (its rows of windows before the
// one it takes next go to COLD), then the truncation of every stored slot
// not in use (past windows, and future ones no row is routed to yet) that
// holds nothing live, each waiting up to wait for the slot's lock
// ([RingNextWait]; 0 skips the truncations), and no further once one
// was busy. It reads first, in one
// statement, what there is to do, and runs only that, each step a short
// transaction of its own: a pass that finds nothing to do is one
// read-only statement. A forward that meets rows claims moved or hold
// (ErrBusy) is left to the next pass and the pass goes on: truncation
// is what keeps claims from walking dead rows, and must not wait on a
// backlog's head being claimed.
func RingRotate(ctx context.Context, db TxBeginner, wait time.Duration) (RingPass, error) {
	var p RingPass
	shape, now, farDue, slots, counts, err := ringState(ctx, db)
	if err != nil {
		return p, err
	}
	p.CountsToFold = counts
	until := now.Add(shape.Horizon - shape.Width)
	p.Stored = len(slots)
	for _, rs := range slots {
		p.Footprint += rs.size
	}
	if farDue {
		n, err := ringRepeat(ctx, func() (int64, error) { return RingSweep(ctx, db, until, ringBatch) })
		p.Swept = n
		if err = p.blocked(err); err != nil {
			return p, err
		}
	}
	for _, rs := range slots {
		if !rs.old {
			continue
		}
		before := shape.start(shape.slotWindow(rs.slot, now))
		n, err := ringRepeat(ctx, func() (int64, error) { return RingForward(ctx, db, rs.slot, before, ringBatch) })
		p.Forwarded += n
		if err = p.blocked(err); err != nil {
			return p, err
		}
	}
	for _, rs := range slots {
		// A slot with live rows and none forwarded keeps them; one whose
		// rows were forwarded is looked at again by ring_truncate_within.
		if wait <= 0 || shape.inUse(rs.slot, now) || (rs.live && !rs.old) {
			continue
		}
		got, err := RingTruncate(ctx, db, rs.slot, wait)
		if err != nil {
			return p, fmt.Errorf("slot %d: %w", rs.slot, err)
		}
		switch got {
		case RingTruncated:
			p.Truncated = append(p.Truncated, rs.slot)
		case RingBusy:
			// Whatever held it (a long transaction touches every slot)
			// would most likely hold the next one too: one wait a pass.
			p.Busy = append(p.Busy, rs.slot)
			return p, nil
		}
	}
	return p, nil
}

// blocked counts a step that met rows other transactions moved or hold
// (ErrBusy), which the next pass takes; any other error it returns.
func (p *RingPass) blocked(err error) error {
	if errors.Is(err, ErrBusy) {
		p.Blocked++
		return nil
	}
	return err
}

// ringRepeat runs step while it moves a whole batch, at most ringBatches
// times, and sums what it moved.
func ringRepeat(ctx context.Context, step func() (int64, error)) (int64, error) {
	var total int64
	for range ringBatches {
		n, err := step()
		total += n
		if err != nil || n < ringBatch || ctx.Err() != nil {
			return total, err
		}
	}
	return total, nil
}
