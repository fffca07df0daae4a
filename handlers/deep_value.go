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
	var sc jsonScan
	deepest := 0
	for i := 0; i < len(v) && deepest <= limit; i++ {
		if sc.step(v[i]) {
			deepest = max(deepest, sc.depth)
		}
	}
	return deepest
}

// jsonScan follows the nesting of JSON text a byte at a time, without
// validating it: what the text is is checked where it was stored.
type jsonScan struct {
	depth            int
	inString, escape bool
}

// step takes the next byte and reports whether it opened an array or an
// object (depth is then the new level). Inside a string, brackets count
// for nothing; '"' and ':' and ',' are the caller's to read from outside.
func (s *jsonScan) step(c byte) (opened bool) {
	switch {
	case s.escape:
		s.escape = false
	case s.inString:
		s.escape, s.inString = c == '\\', c != '"'
	case c == '"':
		s.inString = true
	case c == '[' || c == '{':
		s.depth++
		return true
	case c == ']' || c == '}':
		s.depth--
	}
	return false
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

// carriedEvent is a subscription's stored event (an object) of topic as
// an answer can carry it: with its CloudEvents attributes
// (store.CloudDelivery), each member nesting too deep (its data) written
// as null.
func (h *handler) carriedEvent(c echo.Context, topic string, ev json.RawMessage, what func() string) json.RawMessage {
	ev = store.CloudDelivery(ev, topic)
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
	var (
		out                    bytes.Buffer
		sc                     jsonScan
		deepest, start, copied = 0, -1, 0
	)
	for i, c := range obj {
		top := sc.depth == 1 && !sc.inString
		switch {
		case top && c == ':':
			start, deepest = i+1, 1
		case top && (c == ',' || c == '}'):
			if start >= 0 && deepest-1 > limit {
				out.Write(obj[copied:start])
				out.WriteString("null")
				copied = i
			}
			start = -1
		}
		if sc.step(c) {
			deepest = max(deepest, sc.depth)
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
