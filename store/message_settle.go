package store

import (
	"context"
	"time"
)

// ReceiptResult tells, per receipt, whether an ack, nack or extend applied.
type ReceiptResult struct {
	Receipt Receipt
	OK      bool
}

func receiptArrays(receipts []Receipt) (ids, tokens []int64) {
	ids = make([]int64, len(receipts))
	tokens = make([]int64, len(receipts))
	for i, r := range receipts {
		ids[i], tokens[i] = r.MessageID, r.Token
	}
	return ids, tokens
}

func receiptResults(receipts []Receipt, applied map[int64]int64) []ReceiptResult {
	out := make([]ReceiptResult, len(receipts))
	for i, r := range receipts {
		tok, ok := applied[r.MessageID]
		out[i] = ReceiptResult{Receipt: r, OK: ok && tok == r.Token}
	}
	return out
}

// MessageAck deletes the messages whose receipts are current and promotes
// the next message of their groups. One round trip.
// It also reports whether it promoted any message (one that is now
// visible, for long polls to be woken).
func MessageAck(ctx context.Context, db DBTX, queueID int64, receipts []Receipt) ([]ReceiptResult, bool, error) {
	return messageAck(ctx, db, queueID, receipts, true)
}

// MessageAckUngrouped is [MessageAck] for a caller that knows none of the
// messages has a group (it claimed them, and a message's group never
// changes): it skips the group locks, one statement fewer.
func MessageAckUngrouped(ctx context.Context, db DBTX, queueID int64, receipts []Receipt) ([]ReceiptResult, error) {
	results, _, err := messageAck(ctx, db, queueID, receipts, false)
	return results, err
}

// messageAck runs ferry.message_ack (store/definitions, which ferry.ack
// runs too): with grouped, the group locks of the receipts' messages
// first (ferry.message_group_lock), then the delete of the current ones
// and the promotion of their groups' next messages
// (ferry.message_promote). It answers a row (id, token) per applied receipt and
// (-1, n) when it promoted n > 0 messages (no receipt has id -1).
func messageAck(ctx context.Context, db DBTX, queueID int64, receipts []Receipt, grouped bool) ([]ReceiptResult, bool, error) {
	ids, tokens := receiptArrays(receipts)
	applied, err := queryApplied(ctx, db, `/* ferry:message_ack */ SELECT * FROM ferry.message_ack($1, $2, $3, $4)`,
		queueID, ids, tokens, grouped)
	if err != nil {
		return nil, false, interpretError("message ack", err)
	}
	_, promoted := applied[-1]
	return receiptResults(receipts, applied), promoted, nil
}

// NackParams says what to do with nacked messages.
type NackParams struct {
	Queue    Queue
	Receipts []Receipt
	// Delay before redelivery; nil means the queue's backoff.
	Delay *time.Duration
	// Error is kept as last_error when set.
	Error *string
	// DeadLetter moves the messages to the dead letters at once.
	DeadLetter bool
}

// MessageNack releases the leases of current receipts: the messages become
// visible again after the delay (or the queue's exponential backoff with
// jitter) and every receipt of them goes stale. A message nacked with
// DeadLetter, or on its last allowed receive, is dead-lettered at once. It
// reports how many messages were dead-lettered.
//
// One statement, ferry.message_nack (store/definitions, which ferry.nack
// runs too): the group locks of the receipts' messages, then the nack
// itself, which releases or dead-letters each current target, promotes the
// next message of their groups (ferry.message_promote), and returns one
// row (id, token, dead) per applied receipt.
func MessageNack(ctx context.Context, db DBTX, p NackParams) ([]ReceiptResult, int, error) {
	ids, tokens := receiptArrays(p.Receipts)
	var delayMs *int64
	if p.Delay != nil {
		ms := p.Delay.Milliseconds()
		delayMs = &ms
	}
	applied := map[int64]int64{}
	dead := 0
	err := retry(ctx, func() error {
		clear(applied)
		dead = 0
		rows, err := db.Query(ctx, `/* ferry:message_nack */ SELECT * FROM ferry.message_nack($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			p.Queue.ID, ids, tokens, p.DeadLetter, p.Queue.MaxReceives, p.Error, delayMs,
			p.Queue.RetryMinSeconds, p.Queue.RetryMaxSeconds)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id, tok int64
				isDead  bool
			)
			if err := rows.Scan(&id, &tok, &isDead); err != nil {
				return err
			}
			applied[id] = tok
			if isDead {
				dead++
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, interpretError("message nack", err)
	}
	return receiptResults(p.Receipts, applied), dead, nil
}

// MessageExtend moves the lease of current receipts to now + timeout:
// ferry.message_extend (store/definitions, which ferry.extend runs too).
func MessageExtend(ctx context.Context, db DBTX, queueID int64, receipts []Receipt, timeout time.Duration) ([]ReceiptResult, error) {
	ids, tokens := receiptArrays(receipts)
	applied, err := queryApplied(ctx, db, `/* ferry:message_extend */ SELECT * FROM ferry.message_extend($1, $2, $3, $4)`,
		queueID, ids, tokens, timeout.Milliseconds())
	if err != nil {
		return nil, interpretError("message extend", err)
	}
	return receiptResults(receipts, applied), nil
}

// queryApplied runs a settling statement that answers (id, token) per
// applied receipt (again, whole, on a retryable error) and collects them.
func queryApplied(ctx context.Context, db DBTX, sql string, args ...any) (map[int64]int64, error) {
	applied := map[int64]int64{}
	err := retry(ctx, func() error {
		clear(applied)
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, tok int64
			if err := rows.Scan(&id, &tok); err != nil {
				return err
			}
			applied[id] = tok
		}
		return rows.Err()
	})
	return applied, err
}
