package handlers

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// The answers that carry events (a group's poll, a partition's read) are
// written here field by field instead of by encoding/json, whose
// reflection and whose second pass over every json.RawMessage (it
// checks and compacts each data and attributes value again) were more
// than half of a poll's CPU in the server. The bytes are encoding/json's
// exactly, as jsonEncode writes them (no HTML escaping, a final newline):
// FuzzEventsReplyAsEncodingJSON holds the two to one output. What the
// answer carries was checked where it was stored (a json column, or
// decoded by this server), so it is valid JSON and is only compacted.

// replyJSON answers body, a JSON text that ends with a newline, with the
// given status.
func replyJSON(c echo.Context, status int, body []byte) error {
	return c.Blob(status, echo.MIMEApplicationJSON, body)
}

// replyPoll answers a group's poll.
func replyPoll(c echo.Context, out pollReply) error {
	b := make([]byte, 0, 64+eventRepliesSize(out.Events))
	b = append(b, `{"generation":`...)
	b = strconv.AppendInt(b, out.Generation, 10)
	b = append(b, `,"partitions":`...)
	if out.Partitions == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, p := range out.Partitions {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(p), 10)
		}
		b = append(b, ']')
	}
	b = append(b, `,"events":`...)
	b = appendEventReplies(b, out.Events)
	return replyJSON(c, http.StatusOK, append(b, "}\n"...))
}

// replyEventsRead answers a partition's read: {"events":[...],"next_offset":n}.
func replyEventsRead(c echo.Context, events []eventReply, next int64) error {
	b := make([]byte, 0, 64+eventRepliesSize(events))
	b = append(b, `{"events":`...)
	b = appendEventReplies(b, events)
	b = append(b, `,"next_offset":`...)
	b = strconv.AppendInt(b, next, 10)
	return replyJSON(c, http.StatusOK, append(b, "}\n"...))
}

// eventRepliesSize is about the size of events as JSON: what the buffer
// starts with, so that it seldom grows.
func eventRepliesSize(events []eventReply) int {
	n := 2
	for i := range events {
		n += 256 + len(events[i].ID) + len(events[i].Data) + len(events[i].Attributes)
	}
	return n
}

// appendEventReplies appends events as a JSON array (null when nil, as
// encoding/json writes a nil slice).
func appendEventReplies(b []byte, events []eventReply) []byte {
	if events == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range events {
		if i > 0 {
			b = append(b, ',')
		}
		b = events[i].appendJSON(b)
	}
	return append(b, ']')
}

// appendJSON appends the event as encoding/json encodes eventReply: its
// fields in order, the omitempty ones only when set.
func (r *eventReply) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, r.ID)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, r.Type)
	b = append(b, `,"key":`...)
	b = appendOptionalString(b, r.Key)
	b = append(b, `,"data":`...)
	b = appendCompactJSON(b, r.Data)
	b = append(b, `,"attributes":`...)
	b = appendCompactJSON(b, r.Attributes)
	b = append(b, `,"partition":`...)
	b = strconv.AppendInt(b, int64(r.Partition), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, r.Offset, 10)
	b = append(b, `,"published_at":"`...)
	b = r.PublishedAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","source":`...)
	b = appendJSONString(b, r.Source)
	for _, f := range []struct {
		name string
		v    *string
	}{{`,"subject":`, r.Subject}, {`,"time":`, r.Time}, {`,"datacontenttype":`, r.DataContentType}, {`,"dataschema":`, r.DataSchema}} {
		if f.v != nil {
			b = appendJSONString(append(b, f.name...), *f.v)
		}
	}
	b = append(b, `,"extensions":`...)
	b = appendRawMap(b, r.Extensions)
	if r.DataBase64 != nil {
		b = appendJSONString(append(b, `,"data_base64":`...), *r.DataBase64)
	}
	return append(b, '}')
}

// appendOptionalString appends *s as a JSON string, or null.
func appendOptionalString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendJSONString(b, *s)
}

// appendRawMap appends m as a JSON object, its keys sorted, as
// encoding/json writes a map (null when nil).
func appendRawMap(b []byte, m map[string]json.RawMessage) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendJSONString(b, k), ':')
		b = appendCompactJSON(b, m[k])
	}
	return append(b, '}')
}

// appendCompactJSON appends v, valid JSON text, without the whitespace
// between its tokens (null when empty, as encoding/json writes a nil
// json.RawMessage).
func appendCompactJSON(b []byte, v []byte) []byte {
	if len(v) == 0 {
		return append(b, "null"...)
	}
	inString, escape, start := false, false, 0
	for i, c := range v {
		switch {
		case escape:
			escape = false
		case inString:
			escape, inString = c == '\\', c != '"'
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			b = append(b, v[start:i]...)
			start = i + 1
		}
	}
	return append(b, v[start:]...)
}

// appendJSONString appends s as a JSON string as encoding/json writes it
// without HTML escaping: '"' and '\\' escaped, control characters as
// \b \f \n \r \t or \u00XX, each byte of invalid UTF-8 as \ufffd, and
// U+2028 and U+2029 escaped (JavaScript reads them as line ends).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		var esc string
		size := 1
		switch {
		case c == '"':
			esc = `\"`
		case c == '\\':
			esc = `\\`
		case c == '\b':
			esc = `\b`
		case c == '\f':
			esc = `\f`
		case c == '\n':
			esc = `\n`
		case c == '\r':
			esc = `\r`
		case c == '\t':
			esc = `\t`
		case c < 0x20:
			esc = `\u00` + string(hex[c>>4]) + string(hex[c&0xF])
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			size = n
			switch {
			case r == utf8.RuneError && n == 1:
				esc = `\ufffd`
			case r == '\u2028':
				esc = `\u2028`
			case r == '\u2029':
				esc = `\u2029`
			default:
				i += n
				continue
			}
		}
		b = append(append(b, s[start:i]...), esc...)
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}
