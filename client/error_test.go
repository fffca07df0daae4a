package client_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// TestErrorFields decodes a 400's field errors; this client checks answers
// only, since the request is invalid on purpose.
func TestErrorFields(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	c := client.New(env.URL, ferrytest.AdminKey, client.WithHTTPClient(openapitest.New(t).Client(t, nil)))
	ctx := context.Background()
	_, _, err := c.PutQueue(ctx, "q", client.QueueConfig{})
	require.NoError(t, err)
	_, err = c.Receive(ctx, "q", client.Receive{MaxMessages: 500})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusBadRequest, e.Status)
	require.Equal(t, "invalid_request", e.Code)
	require.NotEmpty(t, e.Errors)
	require.Equal(t, "max_messages", e.Errors[0].Field)
	require.False(t, e.Temporary())

	bad := client.New(env.URL, "wrong-key")
	_, err = bad.GetQueue(ctx, "q")
	require.True(t, client.IsCode(err, "unauthorized"), "%v", err)
}
