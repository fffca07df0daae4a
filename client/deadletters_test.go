package client_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
)

// TestDeadLettersPageAndRedriveOldest: the dead letters come in pages in
// send order, and a redrive by Limit moves the oldest back to the queue.
func TestDeadLettersPageAndRedriveOldest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c, _ := setup(t)
	putQueue(t, c, "q", client.QueueConfig{})
	ids := []string{send(t, c, "q", 1), send(t, c, "q", 2), send(t, c, "q", 3)}
	ms, err := c.Receive(ctx, "q", client.Receive{MaxMessages: 10})
	require.NoError(t, err)
	require.Len(t, ms, 3)
	for _, m := range ms {
		_, err := c.Nack(ctx, "q", client.Nack{DeadLetter: true, Error: "poison"}, m.Receipt)
		require.NoError(t, err)
	}

	page, err := c.ListDeadLetters(ctx, "q", client.Page{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Messages, 2)
	require.Equal(t, ids[:2], []string{page.Messages[0].ID, page.Messages[1].ID})
	require.NotNil(t, page.Next)
	page, err = c.ListDeadLetters(ctx, "q", client.Page{Limit: 2, After: *page.Next})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
	require.Equal(t, ids[2], page.Messages[0].ID)
	require.Nil(t, page.Next)

	n, err := c.RedriveDeadLetters(ctx, "q", client.Redrive{Limit: 1})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	back, err := c.Receive(ctx, "q", client.Receive{MaxMessages: 10})
	require.NoError(t, err)
	require.Len(t, back, 1)
	require.Equal(t, ids[0], back[0].ID, "the oldest dead letter went back")

	require.NoError(t, c.PurgeDeadLetters(ctx, "q"))
	page, err = c.ListDeadLetters(ctx, "q", client.Page{})
	require.NoError(t, err)
	require.Empty(t, page.Messages)
}
