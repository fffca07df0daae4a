package push

import (
	"context"
	"time"

	"github.com/ferry-mq/ferry/store"
)

// settlement is what a round of results asks of the store.
type settlement struct {
	acks     []store.Receipt
	nacks    map[nackKey][]store.Receipt
	attempts []store.PushAttempt
	// succeeded: some attempt succeeded; gone: some answered 410;
	// grouped: some message had a group (an ack may promote the next).
	succeeded, gone, grouped bool
}

// nackKey groups the failures of a round: the delay before the retry (-1:
// the target's backoff) and the error kept as last_error.
type nackKey struct {
	delay time.Duration
	err   string
}

// settle acks the successes, nacks the failures (after Retry-After, or
// with the target's backoff; dead-lettered on the last allowed attempt),
// records the attempts and the target's failure state.
// It reports whether a claim may now find a message it did not before.
func (r *targetRun) settle(results []pushResult) bool {
	if len(results) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := r.tally(results)
	r.ack(ctx, s)
	r.nack(ctx, s)
	if err := store.PushAttemptRecord(ctx, r.p.pool, r.t.ID, s.attempts); err != nil {
		r.log.Warn("push attempts not recorded", "error", err)
	}
	if !r.recordOutcome(ctx, s) {
		return true
	}
	return s.grouped || len(s.nacks) > 0
}

// tally sorts a round's results into acks, nacks and attempts, and tells
// Observe of each.
func (r *targetRun) tally(results []pushResult) settlement {
	s := settlement{nacks: map[nackKey][]store.Receipt{}, attempts: make([]store.PushAttempt, 0, len(results))}
	for _, res := range results {
		s.grouped = s.grouped || res.msg.Group != nil
		a := store.PushAttempt{MessageID: res.publicID, Attempt: res.msg.ReceiveCount, OK: res.ok(), Duration: res.dur, At: time.Now()}
		if res.status != 0 {
			code := res.status
			a.StatusCode = &code
		}
		if res.err != "" {
			e := res.err
			a.Error = &e
		}
		s.attempts = append(s.attempts, a)
		outcome := "failed"
		switch {
		case res.ok():
			s.acks = append(s.acks, res.msg.Receipt)
			s.succeeded = true
			outcome = "ok"
		default:
			s.gone = s.gone || res.gone()
			if res.gone() {
				outcome = "gone"
			}
			d := time.Duration(-1)
			if res.retryAfter != nil {
				d = *res.retryAfter
			}
			k := nackKey{delay: d, err: res.err}
			s.nacks[k] = append(s.nacks[k], res.msg.Receipt)
		}
		if r.p.cfg.Observe != nil {
			var since time.Duration
			if res.ok() {
				since = time.Since(res.msg.SentAt)
			}
			r.p.cfg.Observe(outcome, since)
		}
	}
	return s
}

// ack acks the successes; an ack that promoted the next message of a
// group wakes the target's waiters (store.MessageAckAndWake decides).
func (r *targetRun) ack(ctx context.Context, s settlement) {
	if len(s.acks) == 0 {
		return
	}
	var err error
	if s.grouped {
		_, err = store.MessageAckAndWake(ctx, r.p.pool, r.p.cfg.Notifier, r.t.ID, s.acks)
	} else {
		_, err = store.MessageAckUngrouped(ctx, r.p.pool, r.t.ID, s.acks)
	}
	if err != nil {
		r.log.Warn("push ack failed: the messages will be pushed again", "error", err)
	}
}

// nack releases the failures: one nack per (delay, error), so each
// message keeps its own error; a nack that made a message claimable at
// once wakes the target's waiters (store.MessageNackAndWake decides).
func (r *targetRun) nack(ctx context.Context, s settlement) {
	for k, receipts := range s.nacks {
		p := store.NackParams{Queue: r.t.Queue, Receipts: receipts}
		e := k.err
		p.Error = &e
		if k.delay >= 0 {
			d := k.delay
			p.Delay = &d
		}
		if _, _, err := store.MessageNackAndWake(ctx, r.p.pool, r.p.cfg.Notifier, p); err != nil {
			r.log.Warn("push nack failed", "error", err)
		}
	}
}

// recordOutcome writes the target's failure state when it may change
// (rarely), and disables the target after 410 Gone or failing too long.
// False if the write failed.
func (r *targetRun) recordOutcome(ctx context.Context, s settlement) bool {
	t := &r.t
	failing := !s.succeeded
	write := s.gone ||
		(failing && (t.FailingSince == nil || time.Since(*t.FailingSince) > r.p.cfg.DisableAfter)) ||
		(!failing && t.FailingSince != nil)
	if !write {
		return true
	}
	reason := ""
	if s.gone {
		reason = "the endpoint answered 410 Gone"
	}
	disabled, err := store.PushOutcome(ctx, r.p.pool, store.PushOutcomeParams{
		QueueID: t.ID, Succeeded: s.succeeded, DisableReason: reason, DisableAfter: r.p.cfg.DisableAfter,
	})
	if err != nil {
		r.log.Warn("push state not recorded", "error", err)
		return false
	}
	now := time.Now()
	if s.succeeded {
		t.FailingSince = nil
	} else if t.FailingSince == nil {
		t.FailingSince = &now
	}
	if disabled {
		t.DisabledAt = &now
		r.log.Warn("push disabled", "reason", reason)
	}
	return true
}
