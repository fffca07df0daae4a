package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/ferry-mq/ferry/client"
)

// FerryClient is the part of Ferry's HTTP API the bench uses, on the
// project's Go client (package client) with its retries off: an error is
// a result the bench reports, never repeated. Two gaps are kept, both so
// that a measurement times only what it names: Send and Publish post a
// request body encoded once beforehand (SendRequest, PublishRequest)
// rather than encoding messages on every call, and the group-read
// scenario's poll (ferryMember) reads the raw answer to time its decoding
// apart. Both go through call, the only hand-written request left.
type FerryClient struct {
	base string
	hc   *http.Client
	c    *client.Client
}

// NewFerryClient returns a client for the server at base.
func NewFerryClient(base string) *FerryClient {
	return newFerryClient(base, newHTTPClient())
}

func newFerryClient(base string, hc *http.Client) *FerryClient {
	return &FerryClient{base: base, hc: hc, c: client.New(base, adminKey, client.WithHTTPClient(hc), client.WithRetries(0))}
}

// At returns a client for another server, sharing the connection pool.
func (c *FerryClient) At(base string) *FerryClient {
	return newFerryClient(base, c.hc)
}

// call sends a request with a body encoded beforehand (see FerryClient)
// and returns the status and the whole response body.
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

// do is call for a request that must be answered with want (a problem
// answer becomes an error naming the status and the problem).
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

// created is err, or an error when a PUT that had to create found its
// resource there already.
func created(what string, ok bool, err error) error {
	if err == nil && !ok {
		return fmt.Errorf("%s existed already", what)
	}
	return err
}

// CreateQueue creates a queue with the default configuration.
func (c *FerryClient) CreateQueue(ctx context.Context, name string) error {
	_, ok, err := c.c.PutQueue(ctx, name, client.QueueConfig{})
	return created("queue "+name, ok, err)
}

// CreateTopic creates a topic with the given number of partitions.
func (c *FerryClient) CreateTopic(ctx context.Context, name string, partitions int) error {
	_, ok, err := c.c.PutTopic(ctx, name, client.TopicConfig{Partitions: &partitions})
	return created("topic "+name, ok, err)
}

// DeleteTopic deletes a topic (its subscriptions and groups with it).
func (c *FerryClient) DeleteTopic(ctx context.Context, name string) error {
	return c.c.DeleteTopic(ctx, name)
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
	_, err := c.do(ctx, http.MethodPost, "/v1/queues/"+queue+"/messages", req, http.StatusCreated)
	return err
}

// Target is a queue (Topic empty) or a subscription: the receive and
// ack calls take either.
type Target struct{ Topic, Name string }

// QueueTarget names a queue.
func QueueTarget(queue string) Target { return Target{Name: queue} }

// SubscriptionTarget names a subscription.
func SubscriptionTarget(topic, sub string) Target { return Target{Topic: topic, Name: sub} }

// CreateSubscription creates a subscription with the given request body
// (JSON of the spec's SubscriptionRequest).
func (c *FerryClient) CreateSubscription(ctx context.Context, topic, sub, req string) error {
	var cfg client.SubscriptionConfig
	if err := json.Unmarshal([]byte(req), &cfg); err != nil {
		return fmt.Errorf("subscription request %s: %w", req, err)
	}
	_, ok, err := c.c.PutSubscription(ctx, topic, sub, cfg)
	return created("subscription "+topic+"/"+sub, ok, err)
}

// Receive claims up to maxMessages messages of a queue, waiting up to wait
// seconds, and returns their receipts.
func (c *FerryClient) Receive(ctx context.Context, queue string, maxMessages, wait int) ([]string, error) {
	return c.ReceiveFrom(ctx, QueueTarget(queue), maxMessages, wait)
}

// ReceiveFrom is Receive from a queue or a subscription.
func (c *FerryClient) ReceiveFrom(ctx context.Context, t Target, maxMessages, wait int) ([]string, error) {
	r := client.Receive{MaxMessages: maxMessages, WaitSeconds: wait}
	if t.Topic == "" {
		ms, err := c.c.Receive(ctx, t.Name, r)
		receipts := make([]string, len(ms))
		for i := range ms {
			receipts[i] = ms[i].Receipt
		}
		return receipts, err
	}
	ds, err := c.c.ReceiveEvents(ctx, t.Topic, t.Name, r)
	receipts := make([]string, len(ds))
	for i := range ds {
		receipts[i] = ds[i].Receipt
	}
	return receipts, err
}

// Ack acknowledges receipts; a stale receipt is an error (no lease of the
// bench ever expires).
func (c *FerryClient) Ack(ctx context.Context, queue string, receipts []string) error {
	return c.AckAt(ctx, QueueTarget(queue), receipts)
}

// AckAt is Ack on a queue or a subscription.
func (c *FerryClient) AckAt(ctx context.Context, t Target, receipts []string) error {
	var res []client.ReceiptResult
	var err error
	if t.Topic == "" {
		res, err = c.c.Ack(ctx, t.Name, receipts...)
	} else {
		res, err = c.c.AckEvents(ctx, t.Topic, t.Name, receipts...)
	}
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Status != "ok" {
			return fmt.Errorf("ack: a receipt was %q", r.Status)
		}
	}
	return nil
}

// ReadEvents reads up to limit events of a partition from an offset
// (`GET .../events`, no wait), decoding every field.
func (c *FerryClient) ReadEvents(ctx context.Context, topic string, partition int, from int64, limit int) ([]groupEvent, error) {
	p, err := c.c.ReadEvents(ctx, topic, client.ReadEvents{Partition: partition, FromOffset: from, Limit: limit})
	if err != nil {
		return nil, err
	}
	return p.Events, nil
}

// Consumer groups.

// groupEvent is an event as a poll returns it; groupPollRequest and
// groupPollReply a poll and its answer.
type (
	groupEvent       = client.Event
	groupPollRequest = client.Poll
	groupPollReply   = client.Polled
)

// errFenced is a commit refused with 409: the member lost a partition.
var errFenced = errors.New("commit fenced (409)")

// groupPath is the path of a consumer group (for ferryMember's raw poll).
func groupPath(topic, group string) string { return "/v1/topics/" + topic + "/groups/" + group }

// GroupPoll polls a consumer group as one member.
func (c *FerryClient) GroupPoll(ctx context.Context, topic, group string, p groupPollRequest) (groupPollReply, error) {
	r, err := c.c.PollGroup(ctx, topic, group, p)
	if err != nil {
		return groupPollReply{}, fmt.Errorf("poll as %s: %w", p.Consumer, err)
	}
	return *r, nil
}

// GroupCommit commits, per partition, the last offset done; errFenced
// when the group refused it with 409.
func (c *FerryClient) GroupCommit(ctx context.Context, topic, group, consumer string, generation int64, offsets map[int]int64) error {
	err := c.c.CommitGroup(ctx, topic, group, consumer, generation, offsets)
	var e *client.Error
	if errors.As(err, &e) && e.Status == http.StatusConflict {
		return errFenced
	}
	if err != nil {
		return fmt.Errorf("commit %s/%s as %s: %w", topic, group, consumer, err)
	}
	return nil
}

// groupDescription is a group as GET .../groups/{g} describes it.
type groupDescription = client.Group

// DescribeGroup describes a group (which also refreshes it: evictions,
// rebalance).
func (c *FerryClient) DescribeGroup(ctx context.Context, topic, group string) (groupDescription, error) {
	g, err := c.c.GetGroup(ctx, topic, group)
	if err != nil {
		return groupDescription{}, err
	}
	return *g, nil
}

// GroupLeave makes consumer leave the group (204).
func (c *FerryClient) GroupLeave(ctx context.Context, topic, group, consumer string) error {
	if err := c.c.LeaveGroup(ctx, topic, group, consumer); err != nil {
		return fmt.Errorf("leave as %s: %w", consumer, err)
	}
	return nil
}
