package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/store"
)

type publishRequest struct {
	Events []publishItem `json:"events"`
}

type publishItem struct {
	ID         *string           `json:"id"`
	Type       *string           `json:"type"`
	Key        *string           `json:"key"`
	Data       json.RawMessage   `json:"data"`
	Attributes map[string]string `json:"attributes"`
}

type publishItemReply struct {
	ID        string `json:"id"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	Duplicate bool   `json:"duplicate"`
}

func (h *handler) toPublishEvents(items []publishItem) ([]store.PublishEvent, error) {
	if err := h.checkBatch("events", items == nil, len(items)); err != nil {
		return nil, err
	}
	var cs checks
	out := make([]store.PublishEvent, len(items))
	text := func(field string, v *string, required bool) string {
		if v == nil {
			if required {
				cs.add(field, "is required")
			}
			return ""
		}
		if *v == "" || len(*v) > 256 || !safeText(*v) {
			cs.add(field, "must be 1-256 bytes of text")
		}
		return *v
	}
	for i, e := range items {
		f := func(name string) string { return fmt.Sprintf("events[%d].%s", i, name) }
		ev := store.PublishEvent{
			ID:   text(f("id"), e.ID, false),
			Type: text(f("type"), e.Type, true),
			Key:  e.Key,
		}
		text(f("key"), e.Key, false)
		data := e.Data
		if string(data) == "null" {
			data = nil
		}
		var err error
		if ev.Data, ev.Attributes, err = h.payload(&cs, fmt.Sprintf("events[%d]", i), "data", data, e.Attributes); err != nil {
			return nil, err
		}
		out[i] = ev
	}
	return out, cs.err()
}

// publishEventsOf reads the events of a publish request: CloudEvents in
// any of their modes (see [cloudModeOf]), or Ferry's JSON.
func (h *handler) publishEventsOf(c echo.Context) ([]store.PublishEvent, error) {
	if mode := cloudModeOf(c.Request()); mode != notCloud {
		return h.cloudEvents(c, mode)
	}
	var req publishRequest
	if err := h.decode(c, &req, false); err != nil {
		return nil, err
	}
	return h.toPublishEvents(req.Events)
}

func (h *handler) eventPublish(c echo.Context) error {
	n, err := name(c, "topic")
	if err != nil {
		return err
	}
	events, err := h.publishEventsOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	var results []store.PublishResult
	err = h.withTopic(ctx, n, func(t store.Topic) (bool, error) {
		if results, err = h.Publisher.Publish(ctx, t, events); err != nil {
			return false, err
		}
		// A duplicate of an event published through the SQL API that the
		// relay has not appended yet: answered once it has its offset.
		return false, store.EventAwaitAppended(ctx, h.Pool, h.Notifier, t, results, pendingWait, h.FallbackPoll, h.Stop)
	})
	if errors.Is(err, store.ErrBusy) {
		p := problem(http.StatusServiceUnavailable, codeUnavailable,
			"the topic is busy: an event id of the batch is claimed by a transaction still open (a SQL API publish "+
				"not committed yet), or its subscriptions kept changing; nothing was written, retry with the same ids")
		p.header = http.Header{"Retry-After": []string{"1"}}
		return p
	}
	if errors.Is(err, store.ErrPending) {
		p := problem(http.StatusServiceUnavailable, codeUnavailable,
			"an event of the batch is a duplicate of an event published through the SQL API that is not in the log yet; "+
				"the batch's other events are published: retry with the same ids (they answer as duplicates) to learn the offsets")
		p.header = http.Header{"Retry-After": []string{"1"}}
		return p
	}
	if err != nil {
		return err
	}
	out := make([]publishItemReply, len(results))
	fresh := 0
	for i, r := range results {
		out[i] = publishItemReply(r)
		if !r.Duplicate {
			fresh++
		}
	}
	h.Metrics.ObservePublished(n, fresh)
	return reply(c, http.StatusCreated, map[string]any{"events": out})
}

// pendingWait bounds how long a publish that is a duplicate of a pending
// SQL API event waits for the relay to append it (milliseconds, normally).
const pendingWait = 5 * time.Second

type eventReply struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Key         *string         `json:"key"`
	Data        json.RawMessage `json:"data"`
	Attributes  json.RawMessage `json:"attributes"`
	Partition   int             `json:"partition"`
	Offset      int64           `json:"offset"`
	PublishedAt time.Time       `json:"published_at"`
	// The CloudEvents attributes (see store.CloudAttrs): extensions
	// always ({} when none), the others when the event has them.
	Source          string                     `json:"source"`
	Subject         *string                    `json:"subject,omitempty"`
	Time            *string                    `json:"time,omitempty"`
	DataContentType *string                    `json:"datacontenttype,omitempty"`
	DataSchema      *string                    `json:"dataschema,omitempty"`
	Extensions      map[string]json.RawMessage `json:"extensions"`
	DataBase64      *string                    `json:"data_base64,omitempty"`
}

func (h *handler) eventRead(c echo.Context) error {
	n, err := name(c, "topic")
	if err != nil {
		return err
	}
	partition, err := queryInt(c, "partition", 0, 0, maxPartitions-1)
	if err != nil {
		return err
	}
	from, err := queryInt(c, "from_offset", 0, 0, 1<<62)
	if err != nil {
		return err
	}
	limit, err := limitOf(c)
	if err != nil {
		return err
	}
	wait, err := queryInt(c, "wait_seconds", 0, 0, 20)
	if err != nil {
		return err
	}
	p := store.ReadParams{
		Partition: int(partition), FromOffset: from, Limit: int(limit),
		Wait: time.Duration(wait) * time.Second, FallbackPoll: h.FallbackPoll, Stop: h.Stop,
		Recheck: h.keyRecheck(c),
	}
	if s := c.QueryParam("from_time"); s != "" {
		if c.QueryParam("from_offset") != "" {
			return invalid("from_time", "cannot be combined with from_offset")
		}
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return invalid("from_time", "must be an RFC 3339 time")
		}
		p.FromTime = &at
	}
	ctx := c.Request().Context()
	t, err := store.TopicGet(ctx, h.Pool, n)
	if err != nil {
		return err
	}
	if p.Partition >= t.Partitions {
		return invalid("partition", "must be below the topic's %d partitions", t.Partitions)
	}
	p.Topic = t
	events, next, err := store.EventRead(ctx, h.Pool, h.Notifier, p)
	if err != nil {
		return err
	}
	out := make([]eventReply, len(events))
	for i, e := range events {
		out[i] = h.toEventReply(c, t.CloudSource(), e)
	}
	if wantsCloudBatch(c.Request()) {
		return cloudBatchReply(c, out, next)
	}
	return replyEventsRead(c, out, next)
}

// toEventReply is an event as reads and polls answer it: absent data is
// null, absent attributes {}; and so are values an answer cannot carry
// (see [carryable]).
func (h *handler) toEventReply(c echo.Context, source string, e store.Event) eventReply {
	data, attrs := e.Data, e.Attributes
	if data == nil {
		data = json.RawMessage(jsonNull)
	}
	if attrs == nil {
		attrs = json.RawMessage(emptyObject)
	}
	what := func(v string) func() string {
		return func() string {
			return fmt.Sprintf("event %s (partition %d, offset %d) %s", e.ID, e.Partition, e.Offset, v)
		}
	}
	data, attrs = h.carriedOr(c, data, jsonNull, what("data")), h.carriedOr(c, attrs, emptyObject, what("attributes"))
	ce := store.DefaultCloudAttrs(source, e.PublishedAt)
	if e.CE != nil {
		ce = *e.CE
	}
	if ce.Extensions == nil {
		ce.Extensions = map[string]json.RawMessage{}
	}
	return eventReply{ID: e.ID, Type: e.Type, Key: e.Key, Data: data, Attributes: attrs,
		Partition: e.Partition, Offset: e.Offset, PublishedAt: e.PublishedAt.UTC(),
		Source: ce.Source, Subject: ce.Subject, Time: ce.Time, DataContentType: ce.DataContentType,
		DataSchema: ce.DataSchema, Extensions: ce.Extensions, DataBase64: ce.DataBase64}
}
