package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// withTopic starts a Ferry with a topic of one partition.
func withTopic(t *testing.T, topic string) (*ferrytest.Env, *client.Client) {
	t.Helper()
	env, c, _ := setup(t)
	_, _, err := c.PutTopic(context.Background(), topic, client.TopicConfig{Partitions: client.Ptr(1)})
	require.NoError(t, err)
	return env, c
}

// readAll reads the topic's partition from offset 0 (up to 100 events).
func readAll(t *testing.T, c *client.Client, topic string, partition int) []client.Event {
	t.Helper()
	page, err := c.ReadEvents(context.Background(), topic, client.ReadEvents{Partition: partition, Limit: 100})
	require.NoError(t, err)
	return page.Events
}

// requireSameCloudEvent compares a published CloudEvent with the one its
// read gives back: every attribute, JSON data as JSON.
func requireSameCloudEvent(t *testing.T, want, got client.CloudEvent) {
	t.Helper()
	wantData, gotData := want.Data, got.Data
	want.Data, got.Data = nil, nil
	require.True(t, want.Time.Equal(got.Time), "time %v, got %v", want.Time, got.Time)
	want.Time, got.Time = time.Time{}, time.Time{}
	require.Equal(t, want, got)
	if wantData == nil {
		require.Nil(t, gotData)
		return
	}
	w, err := json.Marshal(wantData)
	require.NoError(t, err)
	g, err := json.Marshal(gotData)
	require.NoError(t, err)
	require.JSONEq(t, string(w), string(g))
}

// TestPublishCloudEvents: a CloudEvent published in structured, batched
// and binary mode reads back with every attribute it had (the id is the
// dedup key, the partitionkey picks the partition), and a batch with one
// invalid event writes nothing.
func TestPublishCloudEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, c := withTopic(t, "ce")

	full := client.CloudEvent{
		ID: "s-1", Source: "https://shop.invalid/orders", Type: "order.created", Subject: "orders/9912 café",
		Time: time.Date(2026, 5, 6, 7, 8, 9, 123456000, time.FixedZone("", 3600)), DataContentType: "application/json",
		DataSchema: "https://shop.invalid/schema.json", Data: map[string]any{"n": 1.5, "who": "ann"}, PartitionKey: "ORD-9912",
		Extensions: map[string]any{"colour": "red", "count": 42.0, "urgent": true},
	}
	pub, err := c.PublishCloudEvent(ctx, "ce", full)
	require.NoError(t, err)
	require.Equal(t, client.Published{ID: "s-1", Partition: 0, Offset: 0}, pub)
	again, err := c.PublishCloudEvent(ctx, "ce", full)
	require.NoError(t, err)
	require.True(t, again.Duplicate, "the id is the dedup key")

	bytesEvent := client.CloudEvent{ID: "b-1", Source: "/sensors", Type: "reading", DataContentType: "application/octet-stream", DataBase64: []byte{0, 1, 0xff}}
	bare := client.CloudEvent{ID: "b-2", Source: "/sensors", Type: "tick"}
	batch, err := c.PublishCloudEventBatch(ctx, "ce", []client.CloudEvent{bytesEvent, bare})
	require.NoError(t, err)
	require.Equal(t, []client.Published{{ID: "b-1", Offset: 1}, {ID: "b-2", Offset: 2}}, batch)
	// This client checks answers only: the requests below are invalid on
	// purpose, or in binary mode with JSON data (which the spec cannot tell
	// from a JSON publish by its Content-Type).
	unchecked := client.New(env.URL, ferrytest.AdminKey, client.WithHTTPClient(openapitest.New(t).Client(t, nil)))
	_, err = unchecked.PublishCloudEventBatch(ctx, "ce", []client.CloudEvent{{ID: "x-1", Source: "/s", Type: "t"}, {ID: "x-2", Type: "no source"}})
	require.True(t, client.IsCode(err, "invalid_request"), "%v", err)

	binary := client.CloudEvent{
		ID: "n-1", Source: "/room a", Type: "reading", Subject: `café "quoted" 100%`, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		DataContentType: "application/json", Data: map[string]any{"t": 21.5}, PartitionKey: "k1",
		Extensions: map[string]any{"colour": "red"},
	}
	pub, err = unchecked.PublishCloudEventBinary(ctx, "ce", binary)
	require.NoError(t, err)
	require.Equal(t, int64(3), pub.Offset)
	raw := client.CloudEvent{ID: "n-2", Source: "/s", Type: "blob", DataContentType: "text/plain", DataBase64: []byte(`{"looks": "like JSON"}`)}
	_, err = c.PublishCloudEventBinary(ctx, "ce", raw)
	require.NoError(t, err)

	// A binary-mode event without data has no body, which the spec's
	// publish allows.
	empty := client.CloudEvent{ID: "n-3", Source: "/s", Type: "no data"}
	_, err = c.PublishCloudEventBinary(ctx, "ce", empty)
	require.NoError(t, err)

	events := readAll(t, c, "ce", 0)
	require.Len(t, events, 6, "the refused batch wrote nothing")
	for i, want := range []client.CloudEvent{full, bytesEvent, bare, binary, raw, empty} {
		requireSameCloudEvent(t, want, events[i].CloudEvent())
	}
}

// TestPublishSDKCloudEvent: an event.Event of the CloudEvents Go SDK,
// read with CloudEventOf, is published and read back, and the
// CloudEvent of its read is the SDK's event again.
func TestPublishSDKCloudEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c := withTopic(t, "sdk")

	e := event.New()
	e.SetID("sdk-1")
	e.SetSource("https://sdk.invalid/orders")
	e.SetType("com.example.order")
	e.SetSubject("orders/1")
	e.SetTime(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
	e.SetExtension("partitionkey", "ORD-1")
	e.SetExtension("comexampleflag", "yes")
	require.NoError(t, e.SetData(event.ApplicationJSON, map[string]any{"customer": "c-1"}))

	ce, err := client.CloudEventOf(e)
	require.NoError(t, err)
	require.Equal(t, "ORD-1", ce.PartitionKey)
	_, err = c.PublishCloudEvent(ctx, "sdk", ce)
	require.NoError(t, err)

	events := readAll(t, c, "sdk", 0)
	require.Len(t, events, 1)
	out, err := json.Marshal(events[0].CloudEvent())
	require.NoError(t, err)
	back := event.New()
	require.NoError(t, json.Unmarshal(out, &back), "%s", out)
	require.Equal(t, e.ID(), back.ID())
	require.Equal(t, e.Source(), back.Source())
	require.Equal(t, e.Type(), back.Type())
	require.Equal(t, e.Subject(), back.Subject())
	require.True(t, e.Time().Equal(back.Time()))
	require.Equal(t, e.DataContentType(), back.DataContentType())
	require.Equal(t, e.Extensions(), back.Extensions())
	require.JSONEq(t, string(e.Data()), string(back.Data()))
}
