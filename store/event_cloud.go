package store

import (
	"bytes"
	"encoding/json"
	"time"
)

// CloudAttrs are an event's CloudEvents attributes besides id and type
// (the event's own) and data (its Data, when JSON), as the events table
// keeps them in its ce column for an event published as a CloudEvent:
// every attribute given, exactly as given, and data that is not JSON as
// DataBase64 (standard base64 of its bytes). An event published as plain
// JSON has none stored; [DefaultCloudAttrs] are its attributes.
type CloudAttrs struct {
	Source          string                     `json:"source"`
	Subject         *string                    `json:"subject,omitempty"`
	Time            *string                    `json:"time,omitempty"`
	DataContentType *string                    `json:"datacontenttype,omitempty"`
	DataSchema      *string                    `json:"dataschema,omitempty"`
	Extensions      map[string]json.RawMessage `json:"extensions,omitempty"`
	DataBase64      *string                    `json:"data_base64,omitempty"`
}

// CloudTimeLayout is how Ferry writes a time it gives as a CloudEvents
// time (an event published as plain JSON has its published_at): RFC 3339
// in UTC with microseconds, as PostgreSQL's to_char writes it in
// ceBodySQL.
const CloudTimeLayout = "2006-01-02T15:04:05.000000Z"

// DefaultCloudSource is the source of the events of topic published as
// plain JSON.
func DefaultCloudSource(topic string) string { return "/ferry/topics/" + topic }

// DefaultCloudAttrs are the CloudEvents attributes of an event published
// as plain JSON at publishedAt to a topic whose source is source (see
// Topic.CloudSource; API.md § CloudEvents in and out): the topic's
// source, its publish time, and application/json.
func DefaultCloudAttrs(source string, publishedAt time.Time) CloudAttrs {
	at := publishedAt.UTC().Format(CloudTimeLayout)
	ct := "application/json"
	return CloudAttrs{Source: source, Time: &at, DataContentType: &ct}
}

// ceBodySQL is the SQL expression of the CloudEvents members of an
// event's body (a subscription's delivery), merged into the object
// ferry.event_json makes: the stored attributes (ce) of a CloudEvent, or
// the defaults (see [DefaultCloudAttrs]) of a plain JSON event, whose
// source is the SQL text source and publish time at; extensions are {}
// when there are none, as in every other answer.
func ceBodySQL(ce, at, source string) string {
	return `CASE WHEN ` + ce + ` IS NULL THEN jsonb_build_object('source', ` + source + `,
		'time', to_char(` + at + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
		'datacontenttype', 'application/json', 'extensions', '{}'::jsonb)
		ELSE '{"extensions": {}}'::jsonb || ` + ce + ` END`
}

// CloudDelivery is a subscription's delivery body (the event object
// ceBodySQL and ferry.event_json write) with its CloudEvents attributes,
// as every face that gives a delivery answers it: subscription receives,
// peeks and dead letters, pushes in every format, and (in SQL,
// ferry.event_cloud_defaults) ferry.receive. A body written before
// CloudEvents support (migration 000017, or by an older binary in a
// rolling deploy) has none: it gets the attributes of a plain JSON event
// ([DefaultCloudAttrs]) of topic, whose source is the default one (the
// source a delivery keeps is that of its publish, when a topic had no
// source setting), its time the body's published_at, and extensions {}.
// A body that has a source, or is not such an object, is body itself.
func CloudDelivery(body json.RawMessage, topic string) json.RawMessage {
	if hasMember(body, "source") {
		return body
	}
	var ev struct {
		PublishedAt *time.Time `json:"published_at"`
	}
	end := bytes.LastIndexByte(body, '}')
	if end < 0 || json.Unmarshal(body, &ev) != nil || ev.PublishedAt == nil {
		return body
	}
	ce, err := json.Marshal(DefaultCloudAttrs(DefaultCloudSource(topic), *ev.PublishedAt))
	if err != nil {
		return body
	}
	out := make([]byte, 0, len(body)+len(ce)+len(`,"extensions":{}`)+1)
	out = append(out, body[:end]...)
	if len(bytes.TrimSpace(body[1:end])) > 0 {
		out = append(out, ',')
	}
	out = append(out, ce[1:len(ce)-1]...)
	out = append(out, `,"extensions":{}}`...)
	return out
}

// hasMember reports whether obj, a JSON object, has a member named name
// (written without escapes) at its top level: one pass over its bytes,
// the hot path of every delivery read.
func hasMember(obj []byte, name string) bool {
	depth, start, inString, escaped := 0, -1, false, false
	for i, c := range obj {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if start >= 0 && string(obj[start:i]) == name && colonFollows(obj[i+1:]) {
					return true
				}
			}
			continue
		}
		switch c {
		case '"':
			inString, start = true, -1
			if depth == 1 {
				start = i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
	}
	return false
}

// colonFollows reports whether rest begins, after white space, with ':'
// (the string before it was a member's name).
func colonFollows(rest []byte) bool {
	rest = bytes.TrimLeft(rest, " \t\r\n")
	return len(rest) > 0 && rest[0] == ':'
}
