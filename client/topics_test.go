package client_test

import (
	"context"
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
