package push

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"sort"
	"strings"

	"github.com/ferry-mq/ferry/store"
)

// The CloudEvents push formats (API.md § CloudEvents in and out): a
// subscription's delivery body is the event as reads show it, with its
// CloudEvents attributes (store.CloudAttrs, or the defaults of a plain JSON
// event); cloudEvent rebuilds the CloudEvent from it, and the format
// writes it in structured mode (application/cloudevents+json) or in binary
// mode (ce- headers, the data as the body). Either way the request is
// signed like the standard format, over the bytes of the body sent.

// carriedEvent is a delivery's body, as store.ceBodySQL and
// ferry.event_json write it.
type carriedEvent struct {
	ID              string                     `json:"id"`
	Type            string                     `json:"type"`
	Key             *string                    `json:"key"`
	Data            json.RawMessage            `json:"data"`
	Attributes      map[string]string          `json:"attributes"`
	Source          string                     `json:"source"`
	Subject         *string                    `json:"subject"`
	Time            *string                    `json:"time"`
	DataContentType *string                    `json:"datacontenttype"`
	DataSchema      *string                    `json:"dataschema"`
	Extensions      map[string]json.RawMessage `json:"extensions"`
	DataBase64      *string                    `json:"data_base64"`
}

// cloudEventOf reads a delivery body. An event of a plain JSON publish
// with a key carries it as the partitionkey extension (a CloudEvent's key
// came from that extension already).
func cloudEventOf(body []byte) (carriedEvent, error) {
	var ev carriedEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return ev, err
	}
	if ev.Source == "" {
		return ev, fmt.Errorf("the delivery carries no CloudEvents source (written before CloudEvents support)")
	}
	if ev.Extensions == nil {
		ev.Extensions = map[string]json.RawMessage{}
	}
	if _, ok := ev.Extensions["partitionkey"]; !ok && ev.Key != nil {
		ev.Extensions["partitionkey"], _ = json.Marshal(*ev.Key)
	}
	if string(ev.Data) == "null" {
		ev.Data = nil
	}
	return ev, nil
}

// structured is the event in the JSON event format: the context
// attributes, the extensions, and data (or data_base64).
func (ev carriedEvent) structured() ([]byte, error) {
	m := map[string]any{"specversion": "1.0", "id": ev.ID, "source": ev.Source, "type": ev.Type}
	for k, v := range ev.Extensions {
		m[k] = v
	}
	for k, v := range map[string]*string{"subject": ev.Subject, "time": ev.Time,
		"datacontenttype": ev.DataContentType, "dataschema": ev.DataSchema, "data_base64": ev.DataBase64} {
		if v != nil {
			m[k] = *v
		}
	}
	if ev.Data != nil {
		m["data"] = ev.Data
	}
	return json.Marshal(m)
}

// binary is the event in binary mode: its ce- headers (values
// percent-encoded), its Content-Type (the datacontenttype; application/json
// for JSON data without one) and its data as the body: the bytes of
// data_base64, the text of a JSON string when the content type is not
// JSON, else the JSON text.
func (ev carriedEvent) binary(h http.Header) []byte {
	set := func(name, v string) { h[http.CanonicalHeaderKey("ce-"+name)] = []string{percentEncode(v)} }
	set("specversion", "1.0")
	set("id", ev.ID)
	set("source", ev.Source)
	set("type", ev.Type)
	for name, v := range map[string]*string{"subject": ev.Subject, "time": ev.Time, "dataschema": ev.DataSchema} {
		if v != nil {
			set(name, *v)
		}
	}
	names := make([]string, 0, len(ev.Extensions))
	for k := range ev.Extensions {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		set(k, extensionText(ev.Extensions[k]))
	}
	ct := ""
	if ev.DataContentType != nil {
		ct = *ev.DataContentType
	}
	switch {
	case ev.DataBase64 != nil:
		b, _ := base64.StdEncoding.DecodeString(*ev.DataBase64)
		setContentType(h, ct)
		return b
	case ev.Data == nil:
		setContentType(h, ct)
		return nil
	case ct == "":
		ct = "application/json"
	case !jsonMedia(ct):
		var s string
		if json.Unmarshal(ev.Data, &s) == nil {
			setContentType(h, ct)
			return []byte(s)
		}
	}
	setContentType(h, ct)
	return ev.Data
}

func setContentType(h http.Header, ct string) {
	if ct == "" {
		h.Del("Content-Type")
		return
	}
	h.Set("Content-Type", ct)
}

// extensionText is an extension's value as a binary-mode header carries
// it: a string's text, a number's or boolean's JSON.
func extensionText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(raw))
}

// percentEncode encodes a header value as the CloudEvents HTTP binding
// asks: space, double quote, percent and every byte outside printable
// ASCII as %XX of its UTF-8 bytes.
func percentEncode(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// jsonMedia reports whether a content type declares JSON data.
func jsonMedia(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json"))
}

// cloudPayload is a subscription's delivery in a CloudEvents format: the
// body to POST, with its headers set on h.
func cloudPayload(format string, body []byte, h http.Header) ([]byte, error) {
	ev, err := cloudEventOf(body)
	if err != nil {
		return nil, err
	}
	if format == store.PushFormatCloudEventsBinary {
		return ev.binary(h), nil
	}
	h.Set("Content-Type", "application/cloudevents+json")
	return ev.structured()
}

// StructuredCloudEvent is an event, in the shape reads and deliveries
// give it (with its CloudEvents attributes), as a CloudEvent in the JSON
// event format: what the cloudevents push format POSTs, and what a read
// asking for application/cloudevents-batch+json lists.
func StructuredCloudEvent(event []byte) (json.RawMessage, error) {
	ev, err := cloudEventOf(event)
	if err != nil {
		return nil, err
	}
	return ev.structured()
}
