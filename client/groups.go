package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Group is a consumer group: its live members and per-partition progress.
type Group struct {
	Name       string           `json:"name"`
	Topic      string           `json:"topic"`
	Generation int64            `json:"generation"`
	CreatedAt  time.Time        `json:"created_at"`
	Members    []GroupMember    `json:"members"`
	Partitions []GroupPartition `json:"partitions"`
}

// GroupMember is a live member of a group and the partitions it owns.
type GroupMember struct {
	Consumer              string    `json:"consumer"`
	Partitions            []int     `json:"partitions"`
	LastSeen              time.Time `json:"last_seen"`
	SessionTimeoutSeconds int       `json:"session_timeout_seconds"`
}

// GroupPartition is a group's progress on one partition; Owner is nil when
// the group has no member.
type GroupPartition struct {
	Partition       int     `json:"partition"`
	CommittedOffset int64   `json:"committed_offset"`
	HeadOffset      int64   `json:"head_offset"`
	Lag             int64   `json:"lag"`
	Owner           *string `json:"owner"`
	ExpiredSkipped  int64   `json:"expired_skipped"`
}

// GroupList is one page of a topic's consumer groups.
type GroupList struct {
	Groups []Group `json:"groups"`
	Next   *string `json:"next"`
}

// Items is the page's groups and the cursor of the next page.
func (l *GroupList) Items() ([]Group, *string) { return l.Groups, l.Next }

// Poll is one poll of a consumer group by one member (Consumer, required,
// stable across the member's polls and restarts).
type Poll struct {
	Consumer              string `json:"consumer"`
	MaxEvents             int    `json:"max_events,omitempty"`
	WaitSeconds           int    `json:"wait_seconds,omitempty"`
	SessionTimeoutSeconds int    `json:"session_timeout_seconds,omitempty"`
	// Start is where a group this poll creates begins: "latest" (default),
	// "earliest" or an RFC 3339 time.
	Start string `json:"start,omitempty"`
}

// Polled is a poll's answer: the member's generation and partitions, and
// events of those partitions (each partition in offset order).
type Polled struct {
	Generation int64   `json:"generation"`
	Partitions []int   `json:"partitions"`
	Events     []Event `json:"events"`
}

// GroupSeek moves a group: to "earliest", "latest" or an RFC 3339 time, or
// each partition in Offsets to the next offset to read. Exactly one is set.
type GroupSeek struct {
	To      string        `json:"to,omitempty"`
	Offsets map[int]int64 `json:"offsets,omitempty"`
}

func groupPath(topic, group string) string {
	return topicPath(topic) + "/groups/" + url.PathEscape(group)
}

// offsets turns partition → offset into the spec's object of strings.
func offsets(m map[int]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for p, o := range m {
		out[strconv.Itoa(p)] = o
	}
	return out
}

// ListGroups returns one page of the topic's consumer groups.
func (c *Client) ListGroups(ctx context.Context, topic string, p Page) (*GroupList, error) {
	l := &GroupList{}
	if err := c.do(ctx, call{method: http.MethodGet, path: topicPath(topic) + "/groups", query: p.query(), idempotent: true}, l); err != nil {
		return nil, err
	}
	return l, nil
}

// GetGroup returns the group's members and per-partition lag.
func (c *Client) GetGroup(ctx context.Context, topic, group string) (*Group, error) {
	g := &Group{}
	if err := c.do(ctx, call{method: http.MethodGet, path: groupPath(topic, group), idempotent: true}, g); err != nil {
		return nil, err
	}
	return g, nil
}

// DeleteGroup deletes the group and its committed offsets.
func (c *Client) DeleteGroup(ctx context.Context, topic, group string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: groupPath(topic, group), idempotent: true}, nil)
}

// PollGroup joins the group (on the member's first poll) and returns events
// of its partitions. It is retried on 429 only: a poll whose answer was
// lost has moved the member's fetch position past events it never saw, so
// after a 503 or network error leave the group (its next poll resumes from
// the committed offsets), as [Client.Consume] does.
func (c *Client) PollGroup(ctx context.Context, topic, group string, p Poll) (*Polled, error) {
	out := &Polled{}
	if err := c.do(ctx, call{method: http.MethodPost, path: groupPath(topic, group) + "/poll", body: p}, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CommitGroup records that the member finished each partition's events up
// to and including the given offset. A member that no longer owns a
// partition in that generation gets a 409 conflict (it was fenced).
func (c *Client) CommitGroup(ctx context.Context, topic, group, consumer string, generation int64, done map[int]int64) error {
	body := map[string]any{"consumer": consumer, "generation": generation, "offsets": offsets(done)}
	return c.do(ctx, call{method: http.MethodPost, path: groupPath(topic, group) + "/commit", body: body, idempotent: true}, nil)
}

// SeekGroup resets the group's position (and its members' fetch positions).
func (c *Client) SeekGroup(ctx context.Context, topic, group string, s GroupSeek) error {
	body := map[string]any{}
	if s.To != "" {
		body["to"] = s.To
	}
	if len(s.Offsets) > 0 {
		body["offsets"] = offsets(s.Offsets)
	}
	return c.do(ctx, call{method: http.MethodPost, path: groupPath(topic, group) + "/seek", body: body, idempotent: true}, nil)
}

// LeaveGroup takes the member out of the group at once; its partitions go
// to the others at their next poll, from the committed offsets.
func (c *Client) LeaveGroup(ctx context.Context, topic, group, consumer string) error {
	body := map[string]string{"consumer": consumer}
	return c.do(ctx, call{method: http.MethodPost, path: groupPath(topic, group) + "/leave", body: body, idempotent: true}, nil)
}
