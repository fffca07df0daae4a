package store

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strconv"
	"time"
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

// lockGroupsNamed is the statement that takes the locks of the named message
// groups ($2) of queue $1, in key order: a send's, before it writes
// messages into them, and a redrive's, before it moves dead letters back.
const lockGroupsNamed = `/* ferry:message_group_lock_named */
	SELECT count(pg_advisory_xact_lock(k)) FROM (
		SELECT DISTINCT ferry.group_lock_key($1, g) AS k FROM unnest($2::text[]) AS g ORDER BY k
	) locks`
