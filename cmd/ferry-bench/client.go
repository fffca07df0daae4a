package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// FerryClient is the small part of Ferry's HTTP API the bench uses. It is
// what an ordinary Go client would do: encoding/json, keep-alive
// connections, the whole response read.
type FerryClient struct {
	base string
	hc   *http.Client
}

// NewFerryClient returns a client for the server at base.
func NewFerryClient(base string) *FerryClient {
	return &FerryClient{base: base, hc: newHTTPClient()}
}

// At returns a client for another server, sharing the connection pool.
func (c *FerryClient) At(base string) *FerryClient {
	return &FerryClient{base: base, hc: c.hc}
}

// call sends a request (a JSON body when body is not nil) and returns the
// status and the whole response body.
func (c *FerryClient) call(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// do is call for a request that must be answered with want.
func (c *FerryClient) do(ctx context.Context, method, path string, body []byte, want int) ([]byte, error) {
	status, out, err := c.call(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	if status != want {
		return nil, fmt.Errorf("%s %s: status %d: %s", method, path, status, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// CreateQueue creates a queue with the default configuration.
func (c *FerryClient) CreateQueue(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodPut, QueuePath(name), []byte(`{}`), http.StatusCreated)
	return err
}

// CreateTopic creates a topic with the given number of partitions.
func (c *FerryClient) CreateTopic(ctx context.Context, name string, partitions int) error {
	_, err := c.do(ctx, http.MethodPut, "/v1/topics/"+name, fmt.Appendf(nil, `{"partitions":%d}`, partitions), http.StatusCreated)
	return err
}

// DeleteTopic deletes a topic (its subscriptions and groups with it).
func (c *FerryClient) DeleteTopic(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/topics/"+name, nil, http.StatusNoContent)
	return err
}

// PublishRequest encodes a publish of one event per key, each with the
// bench body as its data and no id (Ferry makes one), once, so that the
// load generator does not re-encode it on every request.
func PublishRequest(keys []string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"events":[`)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		key, _ := json.Marshal(k)
		b.WriteString(`{"type":"` + eventType + `","key":`)
		b.Write(key)
		b.WriteString(`,"data":`)
		b.WriteString(body)
		b.WriteByte('}')
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// Publish posts an encoded publish request (see PublishRequest).
func (c *FerryClient) Publish(ctx context.Context, topic string, req []byte) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/topics/"+topic+"/events", req, http.StatusCreated)
	return err
}

// SendRequest encodes a send of n messages with the bench body, once, so
// that the load generator does not re-encode it on every request.
func SendRequest(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"messages":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"body":`)
		b.WriteString(body)
		b.WriteByte('}')
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// Send posts an encoded send request (see SendRequest).
func (c *FerryClient) Send(ctx context.Context, queue string, req []byte) error {
	_, err := c.do(ctx, http.MethodPost, QueuePath(queue)+"/messages", req, http.StatusCreated)
	return err
}

// QueuePath is the path of a queue, SubscriptionPath that of a
// subscription: the receive and ack endpoints hang off either.
func QueuePath(queue string) string { return "/v1/queues/" + queue }

// SubscriptionPath is the path of a subscription (see QueuePath).
func SubscriptionPath(topic, sub string) string {
	return "/v1/topics/" + topic + "/subscriptions/" + sub
}

// CreateSubscription creates a subscription with the given request body.
func (c *FerryClient) CreateSubscription(ctx context.Context, topic, sub, req string) error {
	_, err := c.do(ctx, http.MethodPut, SubscriptionPath(topic, sub), []byte(req), http.StatusCreated)
	return err
}

// Receive claims up to maxMessages messages, waiting up to wait seconds, and
// returns their receipts.
func (c *FerryClient) Receive(ctx context.Context, queue string, maxMessages, wait int) ([]string, error) {
	return c.ReceiveFrom(ctx, QueuePath(queue), maxMessages, wait)
}

// ReceiveFrom is Receive from a queue or a subscription, by path.
func (c *FerryClient) ReceiveFrom(ctx context.Context, path string, maxMessages, wait int) ([]string, error) {
	req := fmt.Appendf(nil, `{"max_messages":%d,"wait_seconds":%d}`, maxMessages, wait)
	out, err := c.do(ctx, http.MethodPost, path+"/receive", req, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var reply struct {
		Messages []struct {
			Receipt string `json:"receipt"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(out, &reply); err != nil {
		return nil, err
	}
	receipts := make([]string, len(reply.Messages))
	for i, m := range reply.Messages {
		receipts[i] = m.Receipt
	}
	return receipts, nil
}

// Ack acknowledges receipts; a stale receipt is an error (no lease of the
// bench ever expires).
func (c *FerryClient) Ack(ctx context.Context, queue string, receipts []string) error {
	return c.AckAt(ctx, QueuePath(queue), receipts)
}

// AckAt is Ack on a queue or a subscription, by path.
func (c *FerryClient) AckAt(ctx context.Context, path string, receipts []string) error {
	req, err := json.Marshal(map[string][]string{"receipts": receipts})
	if err != nil {
		return err
	}
	out, err := c.do(ctx, http.MethodPost, path+"/ack", req, http.StatusOK)
	if err != nil {
		return err
	}
	var reply struct {
		Results []struct {
			Status string `json:"status"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out, &reply); err != nil {
		return err
	}
	for _, r := range reply.Results {
		if r.Status != "ok" {
			return fmt.Errorf("ack: a receipt was %q", r.Status)
		}
	}
	return nil
}

// ReadEvents reads up to limit events of a partition from an offset
// (`GET .../events`, no wait), decoding every field.
func (c *FerryClient) ReadEvents(ctx context.Context, topic string, partition int, from int64, limit int) ([]groupEvent, error) {
	path := fmt.Sprintf("/v1/topics/%s/events?partition=%d&from_offset=%d&limit=%d", topic, partition, from, limit)
	out, err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var reply struct {
		Events     []groupEvent `json:"events"`
		NextOffset int64        `json:"next_offset"`
	}
	err = json.Unmarshal(out, &reply)
	return reply.Events, err
}

// Consumer groups.

// groupEvent is an event as a poll returns it; the bench decodes every
// field, as a client would.
type groupEvent struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Key         *string         `json:"key"`
	Data        json.RawMessage `json:"data"`
	Attributes  json.RawMessage `json:"attributes"`
	Partition   int             `json:"partition"`
	Offset      int64           `json:"offset"`
	PublishedAt time.Time       `json:"published_at"`
}

type groupPollReply struct {
	Generation int64        `json:"generation"`
	Partitions []int        `json:"partitions"`
	Events     []groupEvent `json:"events"`
}

type groupPollRequest struct {
	Consumer              string `json:"consumer"`
	MaxEvents             int    `json:"max_events"`
	WaitSeconds           int    `json:"wait_seconds"`
	SessionTimeoutSeconds int    `json:"session_timeout_seconds"`
	Start                 string `json:"start,omitempty"`
}

// errFenced is a commit refused with 409: the member lost a partition.
var errFenced = errors.New("commit fenced (409)")

// groupPath is the path of a consumer group.
func groupPath(topic, group string) string { return "/v1/topics/" + topic + "/groups/" + group }

// GroupPoll polls a consumer group as one member.
func (c *FerryClient) GroupPoll(ctx context.Context, topic, group string, p groupPollRequest) (groupPollReply, error) {
	var reply groupPollReply
	req, err := json.Marshal(p)
	if err != nil {
		return reply, err
	}
	out, err := c.do(ctx, http.MethodPost, groupPath(topic, group)+"/poll", req, http.StatusOK)
	if err != nil {
		return reply, fmt.Errorf("poll as %s: %w", p.Consumer, err)
	}
	err = json.Unmarshal(out, &reply)
	return reply, err
}

// GroupCommit commits, per partition, the last offset done; errFenced
// when the group refused it with 409.
func (c *FerryClient) GroupCommit(ctx context.Context, topic, group, consumer string, generation int64, offsets map[int]int64) error {
	offs := make(map[string]int64, len(offsets))
	for p, o := range offsets {
		offs[strconv.Itoa(p)] = o
	}
	req, err := json.Marshal(map[string]any{"consumer": consumer, "generation": generation, "offsets": offs})
	if err != nil {
		return err
	}
	status, out, err := c.call(ctx, http.MethodPost, groupPath(topic, group)+"/commit", req)
	switch {
	case err != nil:
		return err
	case status == http.StatusConflict:
		return errFenced
	case status != http.StatusNoContent:
		return fmt.Errorf("commit %s/%s as %s: status %d: %s", topic, group, consumer, status, strings.TrimSpace(string(out)))
	}
	return nil
}

// groupDescription is the part of GET .../groups/{g} the bench checks.
type groupDescription struct {
	Generation int64 `json:"generation"`
	Members    []struct {
		Consumer   string `json:"consumer"`
		Partitions []int  `json:"partitions"`
	} `json:"members"`
	Partitions []struct {
		Partition       int     `json:"partition"`
		CommittedOffset int64   `json:"committed_offset"`
		HeadOffset      int64   `json:"head_offset"`
		Lag             int64   `json:"lag"`
		Owner           *string `json:"owner"`
	} `json:"partitions"`
}

// DescribeGroup describes a group (which also refreshes it: evictions,
// rebalance).
func (c *FerryClient) DescribeGroup(ctx context.Context, topic, group string) (groupDescription, error) {
	var d groupDescription
	out, err := c.do(ctx, http.MethodGet, groupPath(topic, group), nil, http.StatusOK)
	if err != nil {
		return d, err
	}
	err = json.Unmarshal(out, &d)
	return d, err
}

// GroupLeave makes consumer leave the group (204).
func (c *FerryClient) GroupLeave(ctx context.Context, topic, group, consumer string) error {
	req, err := json.Marshal(map[string]string{"consumer": consumer})
	if err != nil {
		return err
	}
	if _, err := c.do(ctx, http.MethodPost, groupPath(topic, group)+"/leave", req, http.StatusNoContent); err != nil {
		return fmt.Errorf("leave as %s: %w", consumer, err)
	}
	return nil
}
