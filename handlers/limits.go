package handlers

import (
	"bytes"
	"encoding/json"
)

// Limits are the request size limits; over one → 413 payload_too_large.
type Limits struct {
	// MaxBodyBytes bounds one message's body and attributes together (an
	// event's data and attributes): their compact JSON encoding, numbers
	// counted as PostgreSQL writes them (storedSize).
	MaxBodyBytes int
	// MaxBatch bounds the items of one batch (messages, receipts, ids).
	MaxBatch int
	// MaxRequestBytes bounds a whole request body.
	MaxRequestBytes int64
}

// DefaultLimits are the limits of a zero [Limits]: those of Ferry's
// default configuration.
func DefaultLimits() Limits {
	return Limits{MaxBodyBytes: 256 << 10, MaxBatch: 1000, MaxRequestBytes: 10 << 20}
}

// payload checks a message's body (an event's data) and attributes, and
// encodes the attributes. Together they must be within the body limit (a
// 413 over it); a body sent with whitespace and over the limit as sent is
// kept compact. item names the message or event ("messages[3]").
func (l Limits) payload(cs *checks, item, bodyName string, body json.RawMessage, attrs map[string]string) (json.RawMessage, json.RawMessage, error) {
	var enc json.RawMessage
	if len(attrs) > 0 {
		cs.attributes(item+".attributes", attrs)
		enc, _ = json.Marshal(attrs)
	}
	if size := storedSize(body) + int64(len(enc)); size > int64(l.MaxBodyBytes) {
		return nil, nil, tooLarge("%s: %s and attributes are %d bytes; the limit is %d", item, bodyName, size, l.MaxBodyBytes)
	}
	if len(body) > l.MaxBodyBytes {
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			return nil, nil, invalid(item+"."+bodyName, "is not valid JSON")
		}
		body = compact.Bytes()
	}
	return body, enc, nil
}

// CheckMessage applies the rules of a REST message's body and attributes
// to one another face made (the SQS face): body is valid JSON that
// PostgreSQL can store (a JSON string the face encoded). It answers the
// body and the encoded attributes to store, or the [*Problem] REST would
// answer (400, or 413 over the body limit).
func (l Limits) CheckMessage(item string, body json.RawMessage, attrs map[string]string) (json.RawMessage, json.RawMessage, error) {
	var cs checks
	b, enc, err := l.payload(&cs, item, "body", body, attrs)
	if err != nil {
		return nil, nil, err
	}
	return b, enc, cs.err()
}
