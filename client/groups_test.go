package client_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
)

// coverGroups: poll, commit, seek, leave, describe, delete.
func coverGroups(t *testing.T, c *client.Client) {
	ctx := context.Background()
	p, err := c.PollGroup(ctx, "orders", "g", client.Poll{Consumer: "w1", Start: "earliest", MaxEvents: 10})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, p.Partitions)
	require.Len(t, p.Events, 2)
	last := p.Events[len(p.Events)-1]
	require.NoError(t, c.CommitGroup(ctx, "orders", "g", "w1", p.Generation, map[int]int64{last.Partition: last.Offset}))
	err = c.CommitGroup(ctx, "orders", "g", "w1", p.Generation+1, map[int]int64{last.Partition: last.Offset})
	require.True(t, client.IsCode(err, "conflict"), "a commit naming another generation is fenced: %v", err)
	g, err := c.GetGroup(ctx, "orders", "g")
	require.NoError(t, err)
	require.Equal(t, last.Offset, g.Partitions[last.Partition].CommittedOffset)
	require.Equal(t, "w1", g.Members[0].Consumer)
	require.NoError(t, c.SeekGroup(ctx, "orders", "g", client.GroupSeek{Offsets: map[int]int64{last.Partition: 0}}))
	require.NoError(t, c.SeekGroup(ctx, "orders", "g", client.GroupSeek{To: "earliest"}))
	require.NoError(t, c.LeaveGroup(ctx, "orders", "g", "w1"))
	l, err := c.ListGroups(ctx, "orders", client.Page{})
	require.NoError(t, err)
	require.Len(t, l.Groups, 1)
	require.Empty(t, l.Groups[0].Members)
	require.NoError(t, c.DeleteGroup(ctx, "orders", "g"))
}
