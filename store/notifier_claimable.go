package store

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Which writes wake whom is decided here, once, for the handlers and the
// push worker alike: a write that makes messages claimable at once (an ack
// that promotes the next message of a group, a nack without delay or one
// that dead-letters a group's head, a redrive, a subscription seek that
// delivered events) wakes the long polls and push workers of its queue
// after it committed, through Notifier.Claimable. The ...AndWake functions
// below are those writes through a db that commits each on return (a
// pool); inside a caller's transaction, call the write itself and
// Claimable after the commit. Writes that make nothing claimable sooner
// wake nothing: an extend (it moves leases later), a purge and a dead
// letter purge (they delete), and a consumer group's seek (its members
// are fenced by the new generation and poll again).

// Claimable announces that the queues (or subscriptions) have messages a
// claim can take now; call it after the commit that made them so. It wakes
// their long polls and push workers here at once and on every instance
// through a NOTIFY (Published), and kicks this instance's push delivery of
// them (the function set with OnClaimable) without waiting to hear its own
// NOTIFY. A nil [Notifier], or no ids, does nothing.
func (n *Notifier) Claimable(ids ...int64) {
	if n == nil || len(ids) == 0 {
		return
	}
	n.Published(ids)
	if n.claimed != nil {
		n.claimed(ids)
	}
}

// Rewound is Claimable for writes that made messages claimable that are
// due long before now (a subscription's seek or creation backfill
// delivers events due at their publish time): this instance's claims of
// the queues first forget their floor ([ClaimFloors]) and read the whole
// queue.
func (n *Notifier) Rewound(ids ...int64) {
	if n == nil || len(ids) == 0 {
		return
	}
	n.floors.forget(ids)
	n.Claimable(ids...)
}

// OnClaimable has fn (the Pusher's kick) called with the ids of every
// Claimable, on the caller's goroutine; it must not block. Set it before
// the [Notifier] is used.
func (n *Notifier) OnClaimable(fn func(ids []int64)) { n.claimed = fn }

// MessageAckAndWake is [MessageAck] through a db that commits it (a pool),
// then wakes the queue when the ack promoted the next message of a group.
func MessageAckAndWake(ctx context.Context, db DBTX, n *Notifier, queueID int64, receipts []Receipt) ([]ReceiptResult, error) {
	results, promoted, err := MessageAck(ctx, db, queueID, receipts)
	if err != nil {
		return nil, err
	}
	if promoted {
		n.Claimable(queueID)
	}
	return results, nil
}

// MessageNackAndWake is [MessageNack] through a db that commits it (a pool),
// then wakes the queue when a message may be claimable now: some receipt
// was current and the nack had a delay of 0, or it dead-lettered a
// message (the next of its group is promoted).
func MessageNackAndWake(ctx context.Context, db DBTX, n *Notifier, p NackParams) ([]ReceiptResult, int, error) {
	results, dead, err := MessageNack(ctx, db, p)
	if err != nil {
		return nil, 0, err
	}
	if nackWakes(p, results, dead) {
		n.Claimable(p.Queue.ID)
	}
	return results, dead, nil
}

// nackWakes is whether a nack made a message claimable at once.
func nackWakes(p NackParams, results []ReceiptResult, dead int) bool {
	applied := false
	for _, r := range results {
		applied = applied || r.OK
	}
	return applied && (dead > 0 || (p.Delay != nil && *p.Delay == 0))
}

// DeadLetterRedriveAndWake is [DeadLetterRedrive], then wakes the queue
// when it moved any message back.
func DeadLetterRedriveAndWake(ctx context.Context, db TxBeginner, n *Notifier, p RedriveParams) (int, error) {
	redriven, err := DeadLetterRedrive(ctx, db, p)
	if err != nil {
		return 0, err
	}
	if redriven > 0 {
		n.Claimable(p.QueueID)
	}
	return redriven, nil
}

// SubscriptionSeekAndWake is [SubscriptionSeek], then wakes the
// subscription when the seek delivered any event.
func SubscriptionSeekAndWake(ctx context.Context, pool *pgxpool.Pool, n *Notifier, s Subscription, start StartPosition) (int64, error) {
	delivered, err := SubscriptionSeek(ctx, pool, s, start)
	if err != nil {
		return 0, err
	}
	if delivered > 0 {
		n.Rewound(s.ID)
	}
	return delivered, nil
}

// MessageMoveAndWake is [MessageMove], then wakes the target queue when
// any message moved, and the source when the move promoted the next
// message of a group there.
func MessageMoveAndWake(ctx context.Context, db TxBeginner, n *Notifier, p MoveParams) (int, error) {
	moved, promoted, err := MessageMove(ctx, db, p)
	if moved > 0 {
		n.Claimable(p.To)
	}
	if promoted {
		n.Claimable(p.From)
	}
	return moved, err
}
