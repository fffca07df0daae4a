package handlers

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/push"
	"github.com/ferry-mq/ferry/store"
)

// CloudEvents in (API.md § CloudEvents in and out; docs/cloudevents.md):
// the publish route also takes CloudEvents 1.0 in the three modes of the
// HTTP protocol binding, and makes of each the same store.PublishEvent a
// JSON publish makes, with its other attributes in PublishEvent.CE. The
// mode is chosen by the request: a structured or batch Content-Type, else
// a ce-specversion header (binary mode), else the JSON publish.

// The CloudEvents media types.
const (
	mediaCloudEvent      = "application/cloudevents+json"
	mediaCloudEventBatch = "application/cloudevents-batch+json"
)

type cloudMode int

const (
	notCloud cloudMode = iota
	cloudStructured
	cloudBatch
	cloudBinary
)

// cloudModeOf is the mode a publish request carries its events in.
func cloudModeOf(r *http.Request) cloudMode {
	mt, _, _ := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
	switch {
	case mt == mediaCloudEvent:
		return cloudStructured
	case mt == mediaCloudEventBatch:
		return cloudBatch
	case len(r.Header.Values("Ce-Specversion")) > 0:
		return cloudBinary
	}
	return notCloud
}

// cloudEvents reads the events of a CloudEvents publish request. A batch
// is all-or-nothing: any invalid event refuses the whole request.
func (h *handler) cloudEvents(c echo.Context, mode cloudMode) ([]store.PublishEvent, error) {
	body, err := h.readBody(c)
	if err != nil {
		return nil, err
	}
	if mode == cloudBinary {
		return h.cloudBinaryEvent(c.Request().Header, body)
	}
	var items []map[string]json.RawMessage
	if mode == cloudBatch {
		if err := parseStrict(body, &items); err != nil {
			return nil, err
		}
		if err := h.checkBatch("events", items == nil, len(items)); err != nil {
			return nil, err
		}
	} else {
		var one map[string]json.RawMessage
		if err := parseStrict(body, &one); err != nil {
			return nil, err
		}
		items = append(items, one)
	}
	var cs checks
	out := make([]store.PublishEvent, len(items))
	for i, m := range items {
		prefix := ""
		if mode == cloudBatch {
			prefix = fmt.Sprintf("[%d].", i)
		}
		if m == nil {
			cs.add(strings.TrimSuffix(prefix, "."), "must be a CloudEvent (a JSON object), not null")
			continue
		}
		in := cloudIn{prefix: prefix, cs: &cs}
		in.readJSON(m)
		if out[i], err = h.cloudEvent(&in); err != nil {
			return nil, err
		}
	}
	return out, cs.err()
}

// cloudIn is one CloudEvent as read, before it is checked: its context
// attributes (nil: absent), extensions and data. Problems go to cs, each
// field named prefix + the attribute (binary mode: its header).
type cloudIn struct {
	prefix  string
	cs      *checks
	context map[string]*string
	ext     map[string]json.RawMessage
	data    json.RawMessage // JSON data
	bytes   []byte          // data that is not JSON
	binary  bool            // bytes holds the data (maybe empty)
}

// contextAttrs are the CloudEvents 1.0 context attributes with a member
// (or header) of their own; every other name is an extension's.
var contextAttrs = map[string]bool{"specversion": true, "id": true, "source": true, "type": true,
	"subject": true, "time": true, "datacontenttype": true, "dataschema": true}

// extensionName is the rule of a CloudEvents attribute's name (the spec
// asks for at most 20 characters, Ferry requires it).
var extensionName = regexp.MustCompile(`^[a-z0-9]{1,20}$`)

func (in *cloudIn) field(name string) string {
	if in.prefix == "ce-" {
		return "ce-" + name
	}
	return in.prefix + name
}

// readJSON reads a structured-mode event (JSON event format): a null
// member is an absent one.
func (in *cloudIn) readJSON(m map[string]json.RawMessage) {
	in.context, in.ext = map[string]*string{}, map[string]json.RawMessage{}
	for name, raw := range m {
		if string(raw) == "null" {
			continue
		}
		switch {
		case contextAttrs[name]:
			var s string
			if json.Unmarshal(raw, &s) != nil {
				in.cs.add(in.field(name), "must be a string")
				continue
			}
			in.context[name] = &s
		case name == "data":
			in.data = raw
		case name == "data_base64":
			in.readBase64(raw)
		default:
			in.extension(name, raw)
		}
	}
	if in.data != nil && in.binary {
		in.cs.add(in.field("data"), "cannot be given with data_base64")
	}
}

func (in *cloudIn) readBase64(raw json.RawMessage) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		in.cs.add(in.field("data_base64"), "must be a string")
		return
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		in.cs.add(in.field("data_base64"), "must be standard base64 (RFC 4648)")
		return
	}
	in.bytes, in.binary = b, true
}

// extension keeps an extension attribute: a name of a-z and 0-9, at most
// 20 long, and a string, number or boolean value.
func (in *cloudIn) extension(name string, raw json.RawMessage) {
	if !extensionName.MatchString(name) {
		in.cs.add(in.field(name), "is not a valid CloudEvents attribute name (a-z and 0-9, 1-20 characters)")
		return
	}
	switch raw[0] {
	case '{', '[':
		in.cs.add(in.field(name), "must be a string, a number or a boolean")
		return
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil && (len(s) > 4096 || !safeText(s)) {
			in.cs.add(in.field(name), "must be at most 4096 bytes of text")
			return
		}
	}
	in.ext[name] = raw
}

// cloudEvent checks a CloudEvent read (the rules of the CloudEvents 1.0
// spec, and Ferry's own for ids, types and keys) and makes its
// PublishEvent. Over the body limit it is a 413: its data (or its bytes
// as base64) and its other attributes, encoded as stored, count.
func (h *handler) cloudEvent(in *cloudIn) (store.PublishEvent, error) {
	attrs := in.checkContext()
	ev := store.PublishEvent{ID: in.str("id"), Type: in.str("type"), Data: in.data}
	if raw, ok := in.ext["partitionkey"]; ok {
		var k string
		if json.Unmarshal(raw, &k) != nil || k == "" || len(k) > 256 {
			in.cs.add(in.field("partitionkey"), "must be a string of 1-256 bytes")
		} else {
			ev.Key = &k
		}
	}
	if len(in.ext) > 0 {
		attrs.Extensions = in.ext
	}
	if in.binary {
		enc := base64.StdEncoding.EncodeToString(in.bytes)
		attrs.DataBase64 = &enc
	}
	ev.CE, _ = json.Marshal(attrs)
	if size := storedSize(in.data) + int64(len(ev.CE)); size > int64(h.limits.MaxBodyBytes) {
		what := strings.TrimSuffix(in.prefix, ".")
		if what == "" || what == "ce-" {
			what = "the event"
		}
		return ev, tooLarge("%s: data and attributes are %d bytes; the limit is %d", what, size, h.limits.MaxBodyBytes)
	}
	return ev, nil
}

func (in *cloudIn) str(name string) string {
	if v := in.context[name]; v != nil {
		return *v
	}
	return ""
}

// checkContext checks the context attributes and gives those the events
// table keeps in its ce column.
func (in *cloudIn) checkContext() store.CloudAttrs {
	for _, name := range []string{"specversion", "id", "source", "type"} {
		if in.context[name] == nil {
			in.cs.add(in.field(name), "is required")
		}
	}
	if v := in.context["specversion"]; v != nil && *v != "1.0" {
		in.cs.add(in.field("specversion"), "must be 1.0 (the CloudEvents version Ferry speaks), not %q", *v)
	}
	for name, v := range in.context {
		if msg := checkContextAttr(name, *v); msg != "" {
			in.cs.add(in.field(name), "%s", msg)
		}
	}
	return store.CloudAttrs{
		Source: in.str("source"), Subject: in.context["subject"], Time: in.context["time"],
		DataContentType: in.context["datacontenttype"], DataSchema: in.context["dataschema"],
	}
}

// checkContextAttr is what is wrong with a context attribute's value
// ("" if nothing).
func checkContextAttr(name, v string) string {
	if v == "" {
		return "must not be empty"
	}
	if !safeText(v) {
		return "must not contain NUL"
	}
	switch name {
	case "id", "type":
		if len(v) > 256 {
			return "must be 1-256 bytes"
		}
	case "source":
		if _, err := url.Parse(v); err != nil || len(v) > 4096 {
			return "must be a URI-reference of at most 4096 bytes"
		}
	case "dataschema":
		if u, err := url.Parse(v); err != nil || !u.IsAbs() || len(v) > 4096 {
			return "must be an absolute URI of at most 4096 bytes"
		}
	case "time":
		if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
			return "must be an RFC 3339 time"
		}
	case "datacontenttype":
		if _, _, err := mime.ParseMediaType(v); err != nil {
			return "must be a media type (RFC 2046)"
		}
	case "subject":
		if len(v) > 4096 {
			return "must be at most 4096 bytes"
		}
	}
	return ""
}

// cloudBinaryEvent reads a binary-mode event: every attribute but
// datacontenttype a ce- header, percent-decoded and valid UTF-8; the
// Content-Type its datacontenttype; the body its data, JSON when the
// content type says JSON, else bytes kept as they are.
func (h *handler) cloudBinaryEvent(header http.Header, body []byte) ([]store.PublishEvent, error) {
	var cs checks
	in := cloudIn{prefix: "ce-", cs: &cs, context: map[string]*string{}, ext: map[string]json.RawMessage{}}
	for k, vs := range header {
		if len(k) <= 3 || !strings.EqualFold(k[:3], "ce-") {
			continue
		}
		in.header(strings.ToLower(k[3:]), vs)
	}
	if ct := header.Get(echo.HeaderContentType); ct != "" {
		in.context["datacontenttype"] = &ct
	}
	if len(body) > 0 {
		in.binaryData(body)
	}
	ev, err := h.cloudEvent(&in)
	if err != nil {
		return nil, err
	}
	return []store.PublishEvent{ev}, cs.err()
}

// header reads one ce- header of binary mode.
func (in *cloudIn) header(name string, vs []string) {
	field := "ce-" + name
	if len(vs) != 1 {
		in.cs.add(field, "must be given once")
		return
	}
	v, err := url.PathUnescape(vs[0])
	switch {
	case err != nil:
		in.cs.add(field, "has an invalid percent-encoding")
		return
	case !utf8.ValidString(v):
		in.cs.add(field, "is not valid UTF-8 (once percent-decoded)")
		return
	case name == "datacontenttype":
		in.cs.add(field, "is not a header of binary mode: the Content-Type is the datacontenttype")
		return
	case name == "data":
		in.cs.add(field, "is not an attribute: the body is the data")
		return
	}
	if contextAttrs[name] {
		in.context[name] = &v
		return
	}
	raw, _ := json.Marshal(v)
	in.extension(name, raw)
}

// binaryData takes a binary-mode body: JSON (checked as a JSON publish's
// data is) when the content type is JSON, else its bytes.
func (in *cloudIn) binaryData(body []byte) {
	ct := in.context["datacontenttype"]
	if ct == nil || !isJSONMedia(*ct) {
		in.bytes, in.binary = body, true
		return
	}
	var data json.RawMessage
	if err := parseStrict(body, &data); err != nil {
		in.cs.add("data", "must be JSON, as the Content-Type %s says", *ct)
		return
	}
	if string(data) != "null" {
		in.data = data
	}
}

// isJSONMedia reports whether a content type declares JSON data:
// application/json, text/json or a +json suffix.
func isJSONMedia(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// wantsCloudBatch reports whether a read asks for a CloudEvents batch
// (Accept: application/cloudevents-batch+json).
func wantsCloudBatch(r *http.Request) bool {
	for _, v := range r.Header.Values(echo.HeaderAccept) {
		for _, part := range strings.Split(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == mediaCloudEventBatch {
				return true
			}
		}
	}
	return false
}

// cloudBatchReply answers a read as a CloudEvents batch: each event as a
// structured CloudEvent, the offset to read next in ferry-next-offset.
func cloudBatchReply(c echo.Context, events []eventReply, next int64) error {
	out := make([]json.RawMessage, len(events))
	for i, e := range events {
		raw, err := json.Marshal(e)
		if err == nil {
			out[i], err = push.StructuredCloudEvent(raw)
		}
		if err != nil {
			return fmt.Errorf("event %s as a CloudEvent: %w", e.ID, err)
		}
	}
	body, err := json.Marshal(out)
	if err != nil {
		return err
	}
	c.Response().Header().Set("ferry-next-offset", fmt.Sprint(next))
	return c.Blob(http.StatusOK, mediaCloudEventBatch, body)
}
