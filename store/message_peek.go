package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// The states of a message that [MessagePeek] reports and filters by, as
// QueueStatsGet counts them: in flight (claimed, its lease running),
// delayed (not claimed, visible later) and available (everything else not
// yet acked: visible now, an expired lease, or waiting behind its group's
// head).
const (
	StateAvailable = "available"
	StateInFlight  = "in_flight"
	StateDelayed   = "delayed"
)

// PeekParams selects one page of [MessagePeek].
type PeekParams struct {
	QueueID int64
	// After is the id of the last message of the previous page (0: from
	// the start).
	After int64
	Limit int
	// State keeps only messages in that state ("": every state).
	State string
}

// PeekedMessage is a message as a peek shows it: no receipt.
type PeekedMessage struct {
	ID           int64
	Body         json.RawMessage
	Attributes   json.RawMessage
	Group        *string
	DedupID      *string
	EventID      *string // a subscription's delivery: the event's id
	ReceiveCount int
	SentAt       time.Time
	VisibleAt    time.Time
	State        string
}

// peekStates is the SQL condition on x of each state filter.
var peekStates = map[string]string{ //nolint:gochecknoglobals // a read-only table
	"":             "",
	StateAvailable: "AND (x.waiting OR x.visible_at <= now())",
	StateInFlight:  "AND NOT x.waiting AND x.visible_at > now() AND x.claim_token IS NOT NULL",
	StateDelayed:   "AND NOT x.waiting AND x.visible_at > now() AND x.claim_token IS NULL",
}

// MessagePeek returns up to p.Limit of the queue's unacked messages with
// ids after p.After, in id order, and whether more follow. It claims
// nothing and writes nothing: a read-only walk of the messages' primary
// key (walkKeys), one probe per message returned. With a State filter a
// step also passes over the messages in other states, so a filtered page
// of a large queue whose messages are mostly in another state reads
// those; it never reads past the page's last match.
func MessagePeek(ctx context.Context, db DBTX, p PeekParams) ([]PeekedMessage, bool, error) {
	cond, ok := peekStates[p.State]
	if !ok {
		return nil, false, &ValidationError{Field: "state", Message: "must be available, in_flight or delayed"}
	}
	rows, err := db.Query(ctx, `/* ferry:message_peek */
		WITH RECURSIVE `+walkKeys("messages", "id", "$2::bigint", cond,
		", x.body, x.attributes, x.grp, x.dedup_id, x.event_id, x.receive_count, x.sent_at, x.visible_at, x.waiting, x.claim_token")+`
		SELECT id, body::text, attributes::text, grp, dedup_id, event_id, receive_count, sent_at, visible_at,
			CASE WHEN waiting OR visible_at <= now() THEN 'available'
			     WHEN claim_token IS NOT NULL THEN 'in_flight' ELSE 'delayed' END
		FROM walk LIMIT $3`, p.QueueID, p.After, p.Limit+1)
	if err != nil {
		return nil, false, interpretError("message peek", err)
	}
	msgs, err := pgx.CollectRows(rows, scanPeeked)
	if err != nil {
		return nil, false, interpretError("message peek", err)
	}
	more := len(msgs) > p.Limit
	if more {
		msgs = msgs[:p.Limit]
	}
	return msgs, more, nil
}

func scanPeeked(row pgx.CollectableRow) (PeekedMessage, error) {
	var (
		m           PeekedMessage
		body, attrs *string
	)
	err := row.Scan(&m.ID, &body, &attrs, &m.Group, &m.DedupID, &m.EventID, &m.ReceiveCount, &m.SentAt, &m.VisibleAt, &m.State)
	if err != nil {
		return m, err
	}
	m.Body = json.RawMessage(*body)
	if attrs != nil {
		m.Attributes = json.RawMessage(*attrs)
	}
	return m, nil
}
