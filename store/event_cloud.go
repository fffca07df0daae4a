package store

import (
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
