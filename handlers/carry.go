package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/store"
)

// Stored values an answer cannot carry. Neither face accepts a body or an
// event's data nesting deeper than MaxValueDepth, but a row written to
// Ferry's tables directly (or by the SQL API before migration 000011) may
// nest deeper than any answer can carry: encoding/json refuses to write a
// json.RawMessage deeper than 10000 levels, or to read a document deeper
// than that. One such row must not break the answers of its neighbours:
//
//   - a receive dead-letters it at once, with a last_error that says why,
//     and delivers the others (were it delivered, or left to its
//     max_receives, every receive that claimed it would fail);
//   - lists and reads (dead letters, event reads, group polls) show its
//     value as null ({} for attributes; a subscription's event keeps its
//     members but the ones nesting too deep), and the server logs it.
//
// A receive that claimed only such messages answers [].

// maxCarriedDepth is the deepest a stored value may nest for an answer to
// carry it: answers hold it three levels down ({"messages":[{"body":
// ...}]}, {"events":[{"data": ...}]}), and the whole answer must stay
// within maxJSONDepth. A subscription's event is such a value: its data,
// at most MaxValueDepth, is one level further down.
const maxCarriedDepth = maxJSONDepth - 3

// carryable reports whether an answer can carry v, JSON text: whether it
// nests at most maxCarriedDepth levels. Values shorter than two bytes a
// level are not read.
func carryable(v []byte) bool {
	if len(v) <= 2*maxCarriedDepth+1 {
		return true
	}
	return nesting(v, maxCarriedDepth) <= maxCarriedDepth
}

// nesting is how deep v, JSON text, nests, counted up to just past limit.
func nesting(v []byte, limit int) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(v) && deepest <= limit; i++ {
		switch c := v[i]; {
		case inString && c == '\\':
			i++
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// carriedOr is v if an answer can carry it, else alt, logged with what
// names the stored value (called only then).
func (h *handler) carriedOr(c echo.Context, v json.RawMessage, alt string, what func() string) json.RawMessage {
	if carryable(v) {
		return v
	}
	h.Log.Warn("a stored value nests too deep for an answer: shown as "+alt, "request_id", requestID(c),
		"value", what(), "bytes", len(v), "max_depth", maxCarriedDepth)
	return json.RawMessage(alt)
}

// carriedEvent is a subscription's stored event (an object) as an answer
// can carry it: each member nesting too deep (its data) written as null.
func (h *handler) carriedEvent(c echo.Context, ev json.RawMessage, what func() string) json.RawMessage {
	if carryable(ev) {
		return ev
	}
	h.Log.Warn("a stored event nests too deep for an answer: its deepest members shown as null", "request_id", requestID(c),
		"value", what(), "bytes", len(ev), "max_depth", maxCarriedDepth)
	return shallowMembers(ev, maxCarriedDepth-1)
}

// shallowMembers is obj, a JSON object, with each member whose value
// nests deeper than limit written as null.
func shallowMembers(obj []byte, limit int) json.RawMessage {
	var out bytes.Buffer
	depth, deepest, inString, start, copied := 0, 0, false, -1, 0
	for i := 0; i < len(obj); i++ {
		switch c := obj[i]; {
		case inString && c == '\\':
			i++
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == ':' && depth == 1:
			start, deepest = i+1, 1
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case (c == ',' && depth == 1) || (c == '}' && depth == 1):
			if start >= 0 && deepest-1 > limit {
				out.Write(obj[copied:start])
				out.WriteString("null")
				copied = i
			}
			start = -1
			if c == '}' {
				depth--
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	out.Write(obj[copied:])
	return out.Bytes()
}

// undeliverable dead-letters the received messages of q that no answer
// can carry (their body, or event, or attributes nest too deep), and
// returns the others and how many it dead-lettered.
func (h *handler) undeliverable(ctx context.Context, c echo.Context, q store.Queue, msgs []store.Message) ([]store.Message, int) {
	var bad []store.Receipt
	kept := msgs[:0:0]
	for _, m := range msgs {
		if carryable(m.Body) && carryable(m.Attributes) {
			kept = append(kept, m)
			continue
		}
		bad = append(bad, m.Receipt)
		h.Log.Warn("a received message nests too deep for an answer: dead-lettered", "request_id", requestID(c),
			"queue_id", q.ID, "message_id", m.ID, "max_depth", maxCarriedDepth)
	}
	if len(bad) == 0 {
		return msgs, 0
	}
	why := fmt.Sprintf("ferry: not delivered: its body or attributes nest deeper than %d levels, "+
		"more than JSON answers can carry (it was written to the database directly); dead-lettered at once", maxCarriedDepth)
	_, dead, err := store.MessageNackAndWake(ctx, h.Pool, h.Notifier, store.NackParams{
		Queue: q, Receipts: bad, Error: &why, DeadLetter: true,
	})
	if err != nil {
		// The others are delivered all the same; these stay leased, and
		// the next receive after their lease tries again.
		h.Log.Error("dead-letter undeliverable messages", "request_id", requestID(c), "queue_id", q.ID, "error", err)
	}
	return kept, dead
}
