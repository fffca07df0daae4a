package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// CloudEvent is a CloudEvents 1.0 event to publish to a topic (API.md §
// "CloudEvents in and out"). ID, Source and Type are required; ID is the
// dedup key within the topic's window and PartitionKey (the partitionkey
// extension) picks the partition. Data is JSON (encoded with
// encoding/json; a json.RawMessage is sent as is); data of another
// content type goes in DataBase64 and is kept byte for byte. A zero Time
// and empty strings are left out.
type CloudEvent struct {
	ID              string
	Source          string
	Type            string
	Subject         string
	Time            time.Time
	DataContentType string
	DataSchema      string
	Data            any
	DataBase64      []byte
	PartitionKey    string
	// Extensions are the other extension attributes: lower-case names,
	// values string, number or bool.
	Extensions map[string]any
}

// The CloudEvents context attributes CloudEvent has a field for.
var cloudAttrs = map[string]bool{
	"specversion": true, "id": true, "source": true, "type": true, "subject": true, "time": true,
	"datacontenttype": true, "dataschema": true, "data": true, "data_base64": true, "partitionkey": true,
}

// attrs is the event's attributes but data, as strings (structured mode
// writes them as JSON strings, binary mode as ce- headers).
func (e CloudEvent) attrs() map[string]string {
	m := map[string]string{"specversion": "1.0", "id": e.ID, "source": e.Source, "type": e.Type}
	for k, v := range map[string]string{
		"subject": e.Subject, "datacontenttype": e.DataContentType, "dataschema": e.DataSchema, "partitionkey": e.PartitionKey,
	} {
		if v != "" {
			m[k] = v
		}
	}
	if !e.Time.IsZero() {
		m["time"] = e.Time.Format(time.RFC3339Nano)
	}
	return m
}

// MarshalJSON writes the event in structured mode.
func (e CloudEvent) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(e.Extensions)+10)
	for k, v := range e.Extensions {
		m[k] = v
	}
	for k, v := range e.attrs() {
		m[k] = v
	}
	if e.DataBase64 != nil {
		m["data_base64"] = e.DataBase64
	} else if e.Data != nil {
		m["data"] = e.Data
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads an event in structured mode (as MarshalJSON, or a
// CloudEvents SDK, writes it); data is kept as a json.RawMessage.
func (e *CloudEvent) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	var out CloudEvent
	var spec, at string
	for k, dst := range map[string]*string{
		"specversion": &spec, "id": &out.ID, "source": &out.Source, "type": &out.Type, "subject": &out.Subject,
		"time": &at, "datacontenttype": &out.DataContentType, "dataschema": &out.DataSchema, "partitionkey": &out.PartitionKey,
	} {
		if raw, ok := m[k]; ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				return fmt.Errorf("cloudevent %s: %w", k, err)
			}
		}
	}
	if spec != "1.0" {
		return fmt.Errorf("cloudevent: specversion %q, not 1.0", spec)
	}
	if err := out.readData(m, at); err != nil {
		return err
	}
	for k, raw := range m {
		if !cloudAttrs[k] {
			if out.Extensions == nil {
				out.Extensions = map[string]any{}
			}
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				return fmt.Errorf("cloudevent %s: %w", k, err)
			}
			out.Extensions[k] = v
		}
	}
	*e = out
	return nil
}

// readData sets the time (at) and the data of m.
func (e *CloudEvent) readData(m map[string]json.RawMessage, at string) error {
	if at != "" {
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return fmt.Errorf("cloudevent time: %w", err)
		}
		e.Time = t
	}
	if raw, ok := m["data"]; ok && string(raw) != "null" {
		e.Data = raw
	}
	if raw, ok := m["data_base64"]; ok {
		return json.Unmarshal(raw, &e.DataBase64)
	}
	return nil
}

// CloudEventOf reads v, encoded with encoding/json, as a CloudEvent in
// structured mode: an event.Event of the CloudEvents Go SDK, say.
func CloudEventOf(v any) (CloudEvent, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return CloudEvent{}, err
	}
	var e CloudEvent
	return e, json.Unmarshal(raw, &e)
}

// CloudEvent is the event as the CloudEvent it was published as (or, for
// an event published as plain JSON, the one Ferry rebuilds: the topic's
// source, its publish time, JSON data); the key is the partitionkey.
func (e Event) CloudEvent() CloudEvent {
	out := CloudEvent{ID: e.ID, Source: e.Source, Type: e.Type}
	for k, v := range e.Extensions {
		if k != "partitionkey" { // Key, below
			if out.Extensions == nil {
				out.Extensions = map[string]any{}
			}
			out.Extensions[k] = v
		}
	}
	for _, p := range []struct {
		dst *string
		src *string
	}{{&out.Subject, e.Subject}, {&out.DataContentType, e.DataContentType}, {&out.DataSchema, e.DataSchema}, {&out.PartitionKey, e.Key}} {
		if p.src != nil {
			*p.dst = *p.src
		}
	}
	if e.Time != nil {
		out.Time, _ = time.Parse(time.RFC3339Nano, *e.Time)
	}
	if e.DataBase64 != nil {
		out.DataBase64 = e.DataBase64
	} else if len(e.Data) > 0 && string(e.Data) != "null" {
		out.Data = e.Data
	}
	return out
}

// PublishCloudEvent publishes one CloudEvent in structured mode
// (application/cloudevents+json). Every CloudEvent has an id, so it is
// retried like a [Client.Publish] with ids: a repeat is a duplicate.
func (c *Client) PublishCloudEvent(ctx context.Context, topic string, e CloudEvent) (Published, error) {
	raw, err := json.Marshal(e)
	if err != nil {
		return Published{}, fmt.Errorf("ferry: encode cloudevent: %w", err)
	}
	return c.publishOne(ctx, topic, call{raw: raw, contentType: "application/cloudevents+json"})
}

// PublishCloudEventBatch publishes 1 to 1000 CloudEvents all-or-nothing
// in batched mode (application/cloudevents-batch+json) and returns one
// result per event, in order; retried like [Client.PublishCloudEvent].
func (c *Client) PublishCloudEventBatch(ctx context.Context, topic string, events []CloudEvent) ([]Published, error) {
	raw, err := json.Marshal(events)
	if err != nil {
		return nil, fmt.Errorf("ferry: encode cloudevents: %w", err)
	}
	return c.publishCloud(ctx, topic, call{raw: raw, contentType: "application/cloudevents-batch+json"})
}

// PublishCloudEventBinary publishes one CloudEvent in binary mode: its
// data is the body (Data encoded as JSON, or DataBase64 as is), its
// content type the Content-Type, every other attribute a ce- header
// (percent-encoded as the HTTP binding asks).
func (c *Client) PublishCloudEventBinary(ctx context.Context, topic string, e CloudEvent) (Published, error) {
	cl := call{header: http.Header{}, contentType: e.DataContentType}
	for k, v := range e.attrs() {
		if k != "datacontenttype" {
			cl.header.Set("Ce-"+k, ceHeaderValue(v))
		}
	}
	for k, v := range e.Extensions {
		s, err := extensionString(v)
		if err != nil {
			return Published{}, fmt.Errorf("ferry: cloudevent extension %s: %w", k, err)
		}
		cl.header.Set("Ce-"+k, ceHeaderValue(s))
	}
	switch {
	case e.DataBase64 != nil:
		cl.raw = e.DataBase64
	case e.Data != nil:
		raw, err := json.Marshal(e.Data)
		if err != nil {
			return Published{}, fmt.Errorf("ferry: encode cloudevent data: %w", err)
		}
		cl.raw = raw
	}
	return c.publishOne(ctx, topic, cl)
}

// publishOne sends a publish of one event.
func (c *Client) publishOne(ctx context.Context, topic string, cl call) (Published, error) {
	out, err := c.publishCloud(ctx, topic, cl)
	if err != nil {
		return Published{}, err
	}
	return out[0], nil
}

// publishCloud sends cl (its body and headers set) to the publish route.
func (c *Client) publishCloud(ctx context.Context, topic string, cl call) ([]Published, error) {
	cl.method, cl.path, cl.idempotent = http.MethodPost, topicPath(topic)+"/events", true
	var out struct {
		Events []Published `json:"events"`
	}
	err := c.do(ctx, cl, &out)
	return out.Events, err
}

// extensionString is an extension's value as a binary-mode header has it.
func extensionString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case json.Number:
		return v.String(), nil
	case int, int32, int64, uint, uint32, uint64, float32, float64:
		return fmt.Sprint(v), nil
	}
	return "", fmt.Errorf("a %T is not a string, number or bool", v)
}

// ceHeaderValue percent-encodes s for a ce- header: space, '"', '%' and
// every byte outside printable ASCII.
func ceHeaderValue(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
