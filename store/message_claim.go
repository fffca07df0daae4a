package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClaimParams selects what [MessageClaim] takes.
type ClaimParams struct {
	Queue             Queue
	Max               int
	VisibilityTimeout time.Duration
	// Floors, when set, lets the claim start at the queue's head
	// ([ClaimFloors]); MessageReceive takes the Notifier's.
	Floors *ClaimFloors
	// leaseOwner, set by PushLeaseClaim only, fences the claim by the
	// queue's push lease: it claims only while this owner holds it live.
	leaseOwner string
}

// MessageClaim leases up to Max visible messages of the queue and reports
// how many it dead-lettered instead (their receive_count had reached
// max_receives). It costs one statement when nothing is dead-lettered.
func MessageClaim(ctx context.Context, db DBTX, p ClaimParams) ([]Message, int, error) {
	var (
		msgs []Message
		dead int
	)
	// Each pass dead-letters what it cannot deliver; a few passes fill the
	// batch even behind a run of exhausted messages.
	for pass := 0; pass < 3 && len(msgs) < p.Max; pass++ {
		got, over, err := messageClaimRetried(ctx, db, p, p.Max-len(msgs))
		if errors.Is(err, ErrPushLeaseLost) && len(msgs) > 0 {
			return msgs, dead, nil // claimed while the lease held: they stand
		}
		if err != nil {
			return msgs, dead, err
		}
		msgs = append(msgs, got...)
		if len(over) == 0 {
			break
		}
		n, err := messageDeadLetter(ctx, db, p.Queue.ID, over, p.Queue.MaxReceives)
		if err != nil && len(msgs) > 0 {
			// The claims stand; the exhausted messages are dead-lettered
			// by a later claim.
			return msgs, dead, nil
		}
		if err != nil {
			return msgs, dead, err
		}
		dead += n
	}
	return msgs, dead, nil
}

// messageClaimRetried is messageClaimOnce, run again (whole: it rolled
// back) when it failed only because of concurrency and db is not a
// transaction. A claim meets a serialization failure where a candidate
// it saw was moved to another partition of ferry.messages by a claim that
// committed meanwhile (store/doc.go, # Held snapshots). Consumers racing
// for a queue's head meet it together, so each attempt after the first
// waits a random while, growing to at most claimWaitCap, so that they fall
// out of step; it gives up only after claimAttempts runs and claimPatience
// both (claimGaveUp): on a loaded machine, ten runs 40 ms apart were not
// enough, and a receive answered 503 (ErrBusy) in a bench's eleventh
// minute. A lock it waited for past lock_timeout (55P03, ErrBusy too) is
// no such failure: that answer goes back to the caller at once.
func messageClaimRetried(ctx context.Context, db DBTX, p ClaimParams, limit int) ([]Message, []int64, error) {
	if _, inTx := db.(pgx.Tx); inTx {
		return messageClaimOnce(ctx, db, p, limit)
	}
	start := time.Now()
	for i := 1; ; i++ {
		got, over, err := messageClaimOnce(ctx, db, p, limit)
		if claimGaveUp(i, time.Since(start)) || ctx.Err() != nil || !errors.Is(err, errBusyRunAgain) {
			return got, over, err
		}
		wait := min(time.Duration(rand.Int64N(int64(i)*int64(time.Millisecond))), claimWaitCap) + 1
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return got, over, err
		}
	}
}

// claimGaveUp reports whether a claim that met rows moved under it, run
// runs times over elapsed, stops trying: after claimAttempts runs and
// claimPatience both.
func claimGaveUp(runs int, elapsed time.Duration) bool {
	return runs >= claimAttempts && elapsed >= claimPatience
}

const (
	claimAttempts = 10
	claimPatience = 2 * time.Second
	claimWaitCap  = 20 * time.Millisecond
)

// messageClaimOnce is one claim statement: ferry.message_claim_from
// (store/definitions), which ferry.receive runs too; its shape keeps it
// O(limit) whatever the planner believes (package doc, # Plans).
//
// Fenced by a push lease (p.leaseOwner), the statement first share-locks
// the owner's live lease row (a takeover, which must update that row,
// waits for the claim to commit), claims only if it found it (an
// uncorrelated EXISTS: checked once, before any message is locked), and
// reports a missing lease as a row of its own (ErrPushLeaseLost). The
// lease is share-locked only when a message is claimable (one probe of
// the claim index first), so an idle worker's poll writes nothing. One
// statement, one round trip, no transaction around it.
func messageClaimOnce(ctx context.Context, db DBTX, p ClaimParams, limit int) ([]Message, []int64, error) {
	sql, owner := claimStatement, (*string)(nil)
	if p.leaseOwner != "" {
		sql, owner = fencedClaimStatement, &p.leaseOwner
	}
	floors := p.Floors
	if _, inTx := db.(pgx.Tx); inTx {
		floors = nil // a caller's transaction may see what the floor's claims did not
	}
	floor, full := floors.floor(p.Queue.ID, time.Now())
	rows, err := db.Query(ctx, sql, p.Queue.ID, limit, p.Queue.MaxReceives, p.VisibilityTimeout.Milliseconds(), owner, floor)
	if err != nil {
		return nil, nil, interpretError("message claim", err)
	}
	defer rows.Close()
	var (
		msgs      []Message
		exhausted []int64
		lost      bool
	)
	for rows.Next() {
		var (
			over  *bool
			m     Message
			id    *int64
			body  *string
			attrs *string
			token *int64
			rc    *int
			sent  *time.Time
		)
		if err := rows.Scan(&over, &id, &body, &attrs, &m.Group, &m.DedupID, &m.EventID, &token, &rc, &sent); err != nil {
			return nil, nil, interpretError("message claim", err)
		}
		switch {
		case over == nil:
			lost = true
			continue
		case *over:
			exhausted = append(exhausted, *id)
			continue
		}
		m.ID = *id
		m.Body = json.RawMessage(*body)
		if attrs != nil {
			m.Attributes = json.RawMessage(*attrs)
		}
		m.Receipt = Receipt{MessageID: m.ID, Token: *token}
		m.ReceiveCount = *rc
		m.SentAt = *sent
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, interpretError("message claim", err)
	}
	if lost {
		return nil, nil, ErrPushLeaseLost
	}
	// Oldest first (the UPDATE returns rows in no particular order): by
	// send time (a subscription's: its event's publish time, which a
	// backfill's ids need not follow), then id.
	slices.SortFunc(msgs, func(a, b Message) int {
		return cmp.Or(a.SentAt.Compare(b.SentAt), cmp.Compare(a.ID, b.ID))
	})
	floors.took(p.Queue.ID, full, msgs)
	return msgs, exhausted, nil
}

// claimStatement is messageClaimOnce's statement: $1 queue, $2 limit,
// $3 max_receives, $4 visibility timeout (ms), $5 NULL, $6 the floor
// (ClaimFloors). Its tag is the claim's, which operators and tests look
// for in pg_stat_activity.
const claimStatement = `/* ferry:message_claim */ SELECT * FROM ferry.message_claim_from($1, $2, $3, $4, $5::uuid, $6)`

// fencedClaimStatement is claimStatement fenced by the push lease of
// owner $5 (see messageClaimOnce): the same function, tagged apart.
const fencedClaimStatement = `/* ferry:message_claim_fenced */ SELECT * FROM ferry.message_claim_from($1, $2, $3, $4, $5::uuid, $6)`

// messageDeadLetter moves the given messages of queue queueID to the dead
// letters if they are still exhausted (available, and received at least
// maxReceives times: re-checked under the lock), promoting the next
// message of their groups: ferry.message_dead_letter, which takes the
// messages' group locks first (ferry.message_group_lock) and promotes by
// ferry.message_promote.
func messageDeadLetter(ctx context.Context, db DBTX, queueID int64, ids []int64, maxReceives int) (int, error) {
	var n int
	err := retry(ctx, func() error {
		return db.QueryRow(ctx, `/* ferry:message_dead_letter */ SELECT ferry.message_dead_letter($1, $2, $3)`,
			queueID, ids, maxReceives).Scan(&n)
	})
	return n, interpretError("message dead-letter", err)
}

// ErrPushLeaseLost means the instance does not hold the target's lease
// (any more): it must not claim for the target.
var ErrPushLeaseLost = errors.New("push lease lost")

// ReceiveParams is a receive request: a claim, and how long to wait for
// messages when none are visible.
type ReceiveParams struct {
	ClaimParams
	Wait time.Duration
	// FallbackPoll is how often a waiting receive checks on its own
	// (default 1s).
	FallbackPoll time.Duration
	// Stop, when closed, ends the wait early (server shutdown).
	Stop <-chan struct{}
	// Recheck, when set, is called before every claim after the first
	// (after each wait): its error ends the long poll with it, nothing claimed.
	// The handlers re-check the request's key with it.
	Recheck func(context.Context) error
}

// MessageReceive claims messages, long-polling up to p.Wait when none are
// visible: it returns as soon as a claim finds any. It reports how many
// messages it dead-lettered on the way.
func MessageReceive(ctx context.Context, db DBTX, n *Notifier, p ReceiveParams) ([]Message, int, error) {
	var (
		msgs []Message
		dead int
	)
	if p.Floors == nil && n != nil {
		p.Floors = n.floors
	}
	err := longPoll(ctx, n, p.Queue.ID, p.Wait, p.FallbackPoll, p.Stop, rechecked(ctx, p.Recheck, func() (bool, error) {
		var (
			d   int
			err error
		)
		msgs, d, err = MessageClaim(ctx, db, p.ClaimParams)
		dead += d
		return len(msgs) > 0, err
	}))
	return msgs, dead, err
}
