package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// TopicConfig is a topic's configuration as PUT sends it: a nil field is
// left out (its default on create, its current value on update).
// Partitions may only grow.
type TopicConfig struct {
	Partitions         *int `json:"partitions,omitempty"`
	RetentionSeconds   *int `json:"retention_seconds,omitempty"`
	DedupWindowSeconds *int `json:"dedup_window_seconds,omitempty"`
	// Source is the CloudEvents source of events published as plain JSON
	// ("": left as it is; the default is /ferry/topics/{topic}).
	Source string `json:"source,omitempty"`
}

// Topic is a topic's configuration and the offsets of its partitions.
type Topic struct {
	Name               string             `json:"name"`
	Partitions         int                `json:"partitions"`
	RetentionSeconds   int                `json:"retention_seconds"`
	DedupWindowSeconds int                `json:"dedup_window_seconds"`
	Source             string             `json:"source"`
	CreatedAt          time.Time          `json:"created_at"`
	UpdatedAt          time.Time          `json:"updated_at"`
	Offsets            []PartitionOffsets `json:"offsets"`
}

// PartitionOffsets are a partition's newest offset (-1 when it never had
// an event) and oldest retained one.
type PartitionOffsets struct {
	Partition    int   `json:"partition"`
	HeadOffset   int64 `json:"head_offset"`
	OldestOffset int64 `json:"oldest_offset"`
}

// TopicList is one page of topics; Next is nil on the last page.
type TopicList struct {
	Topics []Topic `json:"topics"`
	Next   *string `json:"next"`
}

// Items is the page's topics and the cursor of the next page.
func (l *TopicList) Items() ([]Topic, *string) { return l.Topics, l.Next }

// PublishEvent is one event to publish. Type is required; ID (generated
// when empty) is the dedup key within the topic's window; Key picks the
// partition. Data is encoded with encoding/json.
type PublishEvent struct {
	Type       string            `json:"type"`
	ID         string            `json:"id,omitempty"`
	Key        string            `json:"key,omitempty"`
	Data       any               `json:"data,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Published is where one published event went; a Duplicate names the
// original event's partition and offset.
type Published struct {
	ID        string `json:"id"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	Duplicate bool   `json:"duplicate"`
}

// Event is an event of a topic's log, with its CloudEvents attributes:
// those of a CloudEvent exactly as published (Time as written, nil when
// absent), those of an event published as plain JSON rebuilt (the topic's
// source, Time its published_at, DataContentType application/json). Data
// that is not JSON is in DataBase64, decoded, and Data is then null.
type Event struct {
	ID              string            `json:"id"`
	Type            string            `json:"type"`
	Key             *string           `json:"key"`
	Data            json.RawMessage   `json:"data"`
	DataBase64      []byte            `json:"data_base64,omitempty"`
	Attributes      map[string]string `json:"attributes"`
	Partition       int               `json:"partition"`
	Offset          int64             `json:"offset"`
	PublishedAt     time.Time         `json:"published_at"`
	Source          string            `json:"source"`
	Subject         *string           `json:"subject,omitempty"`
	Time            *string           `json:"time,omitempty"`
	DataContentType *string           `json:"datacontenttype,omitempty"`
	DataSchema      *string           `json:"dataschema,omitempty"`
	// Extensions are the extension attributes (string, number, bool or nil).
	Extensions map[string]any `json:"extensions"`
}

// ReadEvents says where to read a partition: from FromOffset, or from
// FromTime when it is set; at most Limit events (0: the server's default),
// waiting up to WaitSeconds (0 to 20) for one when there is none yet.
type ReadEvents struct {
	Partition   int
	FromOffset  int64
	FromTime    time.Time
	Limit       int
	WaitSeconds int
}

// EventPage is what a read returned and the offset to read next.
type EventPage struct {
	Events     []Event `json:"events"`
	NextOffset int64   `json:"next_offset"`
}

func topicPath(name string) string { return "/v1/topics/" + url.PathEscape(name) }

// PutTopic creates the topic or changes the given fields of its
// configuration; created reports a 201.
func (c *Client) PutTopic(ctx context.Context, name string, cfg TopicConfig) (t *Topic, created bool, err error) {
	t = &Topic{}
	var status int
	err = c.do(ctx, call{method: http.MethodPut, path: topicPath(name), body: cfg, idempotent: true, status: &status}, t)
	if err != nil {
		return nil, false, err
	}
	return t, status == http.StatusCreated, nil
}

// GetTopic returns the topic's configuration and offsets.
func (c *Client) GetTopic(ctx context.Context, name string) (*Topic, error) {
	t := &Topic{}
	if err := c.do(ctx, call{method: http.MethodGet, path: topicPath(name), idempotent: true}, t); err != nil {
		return nil, err
	}
	return t, nil
}

// ListTopics returns one page of the topics, sorted by name.
func (c *Client) ListTopics(ctx context.Context, p Page) (*TopicList, error) {
	l := &TopicList{}
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/topics", query: p.query(), idempotent: true}, l); err != nil {
		return nil, err
	}
	return l, nil
}

// DeleteTopic deletes the topic with its events, subscriptions and groups.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: topicPath(name), idempotent: true}, nil)
}

// Publish publishes 1 to 1000 events all-or-nothing and returns one result
// per event, in order. Like a send, it is retried on 503 and network
// errors only when every event has an ID (a repeat is then a duplicate).
func (c *Client) Publish(ctx context.Context, topic string, events ...PublishEvent) ([]Published, error) {
	withIDs := len(events) > 0
	for _, e := range events {
		withIDs = withIDs && e.ID != ""
	}
	var out struct {
		Events []Published `json:"events"`
	}
	body := struct {
		Events []PublishEvent `json:"events"`
	}{events}
	err := c.do(ctx, call{method: http.MethodPost, path: topicPath(topic) + "/events", body: body, idempotent: withIDs}, &out)
	return out.Events, err
}

// ReadEvents reads a partition of the topic's log without consuming it.
func (c *Client) ReadEvents(ctx context.Context, topic string, r ReadEvents) (*EventPage, error) {
	q := url.Values{"partition": {strconv.Itoa(r.Partition)}}
	if r.FromTime.IsZero() {
		q.Set("from_offset", strconv.FormatInt(r.FromOffset, 10))
	} else {
		q.Set("from_time", r.FromTime.Format(time.RFC3339Nano))
	}
	if r.Limit > 0 {
		q.Set("limit", strconv.Itoa(r.Limit))
	}
	if r.WaitSeconds > 0 {
		q.Set("wait_seconds", strconv.Itoa(r.WaitSeconds))
	}
	out := &EventPage{}
	if err := c.do(ctx, call{method: http.MethodGet, path: topicPath(topic) + "/events", query: q, idempotent: true}, out); err != nil {
		return nil, err
	}
	return out, nil
}
