package sqs

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestToAPIError: each kind of error reaches the client as SQS words it,
// a client's fault as a Sender 4xx, the server's as a Receiver 5xx, and
// only an unknown error is internal (logged, its cause never answered).
func TestToAPIError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		err      error
		status   int
		code     string
		shape    string
		sender   bool
		internal bool
	}{
		{"apiError as it is", noQueue(), 400, codeNonExistentQueue, "QueueDoesNotExist", true, false},
		{"wrapped validation", fmt.Errorf("send: %w", &store.ValidationError{Field: "delay_seconds", Message: "at most 900"}),
			400, codeInvalidParameter, codeInvalidParameter, true, false},
		{"queue full retried by SDKs", &store.QueueFullError{Depth: 10, MaxDepth: 10}, 400, codeThrottled, codeThrottled, true, false},
		{"not found", store.ErrNotFound, 400, codeNonExistentQueue, "QueueDoesNotExist", true, false},
		{"busy", store.ErrBusy, http.StatusServiceUnavailable, codeUnavailable, codeUnavailable, false, false},
		{"unknown", errors.New("connection refused by a bug"), http.StatusInternalServerError, codeInternal, codeInternal, false, true},
	}
	for _, c := range cases {
		e, internal := toAPIError(c.err)
		require.Equal(t, c.status, e.Status, c.name)
		require.Equal(t, c.code, e.Code, c.name)
		require.Equal(t, c.shape, e.Shape, c.name)
		require.Equal(t, c.sender, e.Sender, c.name)
		require.Equal(t, c.internal, internal, c.name)
		require.NotContains(t, e.Message, "bug", "%s: a cause is never answered", c.name)
	}
	e := invalidParam("MaxNumberOfMessages", "must be between 1 and 10")
	require.Equal(t, "Value for parameter MaxNumberOfMessages is invalid. Reason: must be between 1 and 10", e.Message)
	require.Equal(t, codeMissingParameter+": The request must contain the parameter QueueUrl.", missingParam("QueueUrl").Error())
}
