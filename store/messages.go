package store

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Receipt identifies one claim of one message: the message id and the claim
// token the claim set. It is handed to consumers as an opaque string.
type Receipt struct {
	MessageID int64
	Token     int64
}

// String encodes the receipt.
func (r Receipt) String() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(r.MessageID))
	binary.BigEndian.PutUint64(b[8:], uint64(r.Token))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ParseReceipt decodes a receipt made by [Receipt.String], and nothing else:
// the decoding is strict (no ignored trailing bits) and the string must be
// exactly the encoding of what it decodes to (base64 decoders also skip
// \r and \n), so no other spelling of a receipt matches its claim.
func ParseReceipt(s string) (Receipt, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != 16 || base64.RawURLEncoding.EncodeToString(b) != s {
		return Receipt{}, errors.New("malformed receipt")
	}
	return Receipt{
		MessageID: int64(binary.BigEndian.Uint64(b[:8])),
		Token:     int64(binary.BigEndian.Uint64(b[8:])),
	}, nil
}

// FormatMessageID renders a message id for clients.
func FormatMessageID(id int64) string { return strconv.FormatInt(id, 10) }

// ParseMessageID parses an id made by [FormatMessageID]; ok is false for
// anything else (such an id names no message), other spellings of the
// same number ("+5", "05") included.
func ParseMessageID(s string) (id int64, ok bool) {
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0 && FormatMessageID(id) == s
}

// SendMessage is one message of a send batch, already validated.
type SendMessage struct {
	Body       json.RawMessage
	Attributes json.RawMessage // a JSON object, or nil
	Group      string          // "" = no group
	DedupID    string          // "" = no dedup
	// Delay and DeliverAt: at most one is set; neither means the queue's
	// default delay.
	Delay     *time.Duration
	DeliverAt *time.Time
}

// SendResult is the outcome of one message of a send batch.
type SendResult struct {
	ID        int64
	Duplicate bool
}

// Message is a claimed message, as a consumer receives it.
type Message struct {
	ID         int64
	Body       json.RawMessage
	Attributes json.RawMessage
	Group      *string
	DedupID    *string
	// EventID is the event a subscription's delivery carries (Body is
	// the event); nil for a queue's messages.
	EventID      *string
	Receipt      Receipt
	ReceiveCount int
	SentAt       time.Time
}

// ClaimParams selects what [MessageClaim] takes.
type ClaimParams struct {
	Queue             Queue
	Max               int
	VisibilityTimeout time.Duration
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
		got, over, err := messageClaimOnce(ctx, db, p, p.Max-len(msgs))
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

// messageClaimOnce is one claim statement: ferry.message_claim
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
	rows, err := db.Query(ctx, sql, p.Queue.ID, limit, p.Queue.MaxReceives, p.VisibilityTimeout.Milliseconds(), owner)
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
	return msgs, exhausted, nil
}

// claimStatement is messageClaimOnce's statement: $1 queue, $2 limit,
// $3 max_receives, $4 visibility timeout (ms), $5 NULL. Its tag is the
// claim's, which operators and tests look for in pg_stat_activity.
const claimStatement = `/* ferry:message_claim */ SELECT * FROM ferry.message_claim($1, $2, $3, $4, $5::uuid)`

// fencedClaimStatement is claimStatement fenced by the push lease of
// owner $5 (see messageClaimOnce): the same function, tagged apart.
const fencedClaimStatement = `/* ferry:message_claim_fenced */ SELECT * FROM ferry.message_claim($1, $2, $3, $4, $5::uuid)`

// lockGroupsNamed is the statement that takes the locks of the named message
// groups ($2) of queue $1, in key order: a send's, before it writes
// messages into them, and a redrive's, before it moves dead letters back.
const lockGroupsNamed = `/* ferry:message_group_lock_named */
	SELECT count(pg_advisory_xact_lock(k)) FROM (
		SELECT DISTINCT ferry.group_lock_key($1, g) AS k FROM unnest($2::text[]) AS g ORDER BY k
	) locks`

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

// freshBatch copies b's statements into a new batch, for each attempt of a
// retry: pgx keeps the prepared statement a queued query was sent as in
// the batch, and a batch sent again (on another connection, or after the
// failure made pgx drop its statements) names a statement that does not
// exist there (SQLSTATE 26000), so the retry failed every time.
func freshBatch(b *pgx.Batch) *pgx.Batch {
	nb := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, len(b.QueuedQueries))}
	for i, q := range b.QueuedQueries {
		nb.QueuedQueries[i] = &pgx.QueuedQuery{SQL: q.SQL, Arguments: q.Arguments, Fn: q.Fn}
	}
	return nb
}

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

// MessagePurge deletes every message the queue holds when it starts
// (available, delayed and in flight; their receipts go stale). It waits for
// sends in progress and notes the newest id, then deletes up to that id in
// bounded batches, each its own short transaction, so a purge of millions
// neither holds a lock for long nor stalls sends to other queues. Messages
// sent meanwhile are kept; a group whose head is purged gets its next
// message promoted. A message another transaction holds (received in an
// application's transaction through the SQL API, or whose group's lock
// it holds) is deleted once that transaction ends: the purge returns only
// then, and waits for it holding no lock (messageDeleteAll), so it cannot
// deadlock with it.
func MessagePurge(ctx context.Context, db TxBeginner, queueID int64) error {
	return messagePurge(ctx, db, queueID, purgeBatch)
}

func messagePurge(ctx context.Context, db TxBeginner, queueID int64, batch int) error {
	b := &pgx.Batch{}
	b.Queue(`/* ferry:message_purge_lock */ SELECT pg_advisory_xact_lock(ferry.queue_lock_key($1))`, queueID)
	b.Queue(`/* ferry:message_purge_fence */
		SELECT coalesce((SELECT id FROM ferry.messages WHERE queue_id = $1 ORDER BY id DESC LIMIT 1), 0)`, queueID)
	var fence int64
	err := func() error {
		br := db.SendBatch(ctx, freshBatch(b))
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&fence); err != nil {
			return err
		}
		return br.Close()
	}()
	if err != nil {
		return interpretError("message purge", err)
	}
	err = messageDeleteAll(ctx, db, deleteSet{victims: purgeVictims, queueID: queueID, limit: batch, fence: fence})
	return interpretError("message purge", err)
}

// purgeBatch bounds the messages one purge transaction deletes.
const purgeBatch = 5000
