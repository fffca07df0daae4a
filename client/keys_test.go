package client_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
)

// coverKeys: keys, the audit log and the operations routes.
func coverKeys(t *testing.T, c *client.Client) {
	ctx := context.Background()
	k, err := c.CreateKey(ctx, client.KeyRequest{Name: "worker", Permissions: []client.Permission{{Resource: "queue:dst", Actions: []string{"receive"}}}})
	require.NoError(t, err)
	require.NotEmpty(t, k.Secret)
	got, err := c.GetKey(ctx, k.ID)
	require.NoError(t, err)
	require.Empty(t, got.Secret, "the secret is shown once")
	require.Equal(t, "worker", got.Name)
	l, err := c.ListKeys(ctx, client.Page{})
	require.NoError(t, err)
	require.Len(t, l.Keys, 1)
	require.NoError(t, c.DeleteKey(ctx, k.ID))
	_, err = c.GetKey(ctx, k.ID)
	require.True(t, client.IsCode(err, "not_found"), "%v", err)
	a, err := c.ListAuditLog(ctx, client.Page{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, "key.delete", a.Entries[0].Action)
}
