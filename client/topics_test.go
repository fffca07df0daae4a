package client_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
)

// coverTopics: topics, publish and read.
func coverTopics(t *testing.T, c *client.Client) {
	ctx := context.Background()
	tp, created, err := c.PutTopic(ctx, "orders", client.TopicConfig{Partitions: client.Ptr(2)})
	require.NoError(t, err)
	require.True(t, created)
	require.Len(t, tp.Offsets, 2)
	_, _, err = c.PutTopic(ctx, "gone", client.TopicConfig{})
	require.NoError(t, err)
	l, err := c.ListTopics(ctx, client.Page{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, "gone", l.Topics[0].Name)
	require.NotNil(t, l.Next)
	require.NoError(t, c.DeleteTopic(ctx, "gone"))

	pub, err := c.Publish(ctx, "orders",
		client.PublishEvent{Type: "order.created", ID: "e1", Key: "k", Data: map[string]any{"n": 1}, Attributes: map[string]string{"region": "eu"}},
		client.PublishEvent{Type: "order.created", ID: "e1", Key: "k"},
		client.PublishEvent{Type: "order.paid", Key: "k"})
	require.NoError(t, err)
	require.Len(t, pub, 3)
	require.True(t, pub[1].Duplicate)
	require.Equal(t, pub[0].Offset+1, pub[2].Offset)
	page, err := c.ReadEvents(ctx, "orders", client.ReadEvents{Partition: pub[0].Partition, FromOffset: pub[0].Offset, Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Events, 2)
	require.Equal(t, "e1", page.Events[0].ID)
	require.JSONEq(t, `{"n":1}`, string(page.Events[0].Data))
	require.Equal(t, pub[2].Offset+1, page.NextOffset)
	page, err = c.ReadEvents(ctx, "orders", client.ReadEvents{Partition: pub[0].Partition, FromTime: page.Events[1].PublishedAt})
	require.NoError(t, err)
	require.Equal(t, "order.paid", page.Events[0].Type)
	tp, err = c.GetTopic(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, pub[2].Offset, tp.Offsets[pub[0].Partition].HeadOffset)
}

// TestTopicSourceAndCloudEventFields: a topic's source round-trips, an
// event published as plain JSON reads back with its rebuilt CloudEvents
// attributes, and a structured CloudEvent with a subject and binary data
// reads back with them exactly.
func TestTopicSourceAndCloudEventFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c, _ := setup(t)
	tp, _, err := c.PutTopic(ctx, "t", client.TopicConfig{Partitions: client.Ptr(1), Source: "https://shop.invalid/orders"})
	require.NoError(t, err)
	require.Equal(t, "https://shop.invalid/orders", tp.Source)
	pub, err := c.Publish(ctx, "t", client.PublishEvent{Type: "order.created", Key: "k1", Data: 1})
	require.NoError(t, err)

	ce := `{"specversion":"1.0","id":"ce-1","source":"/room-a","type":"reading","subject":"room-a/t1",` +
		`"time":"2026-01-02T03:04:05+01:00","datacontenttype":"application/octet-stream","data_base64":"AAEC","colour":"red"}`
	var e client.CloudEvent
	require.NoError(t, json.Unmarshal([]byte(ce), &e))
	_, err = c.PublishCloudEvent(ctx, "t", e)
	require.NoError(t, err)

	page, err := c.ReadEvents(ctx, "t", client.ReadEvents{Partition: 0, Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Events, 2)
	plain, cloud := page.Events[0], page.Events[1]
	require.Equal(t, pub[0].ID, plain.ID)
	require.Equal(t, "https://shop.invalid/orders", plain.Source)
	require.Equal(t, "application/json", *plain.DataContentType)
	require.NotNil(t, plain.Time)
	require.Nil(t, plain.Subject)
	require.Nil(t, plain.DataBase64)
	require.Empty(t, plain.Extensions)
	require.Equal(t, "k1", *plain.Key)

	require.Equal(t, "/room-a", cloud.Source)
	require.Equal(t, "room-a/t1", *cloud.Subject)
	require.Equal(t, "2026-01-02T03:04:05+01:00", *cloud.Time)
	require.Equal(t, []byte{0, 1, 2}, cloud.DataBase64)
	require.Equal(t, "null", string(cloud.Data))
	require.Nil(t, cloud.DataSchema)
	require.Equal(t, map[string]any{"colour": "red"}, cloud.Extensions)
}
