package handlers

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestDatabaseLimitIs503: a database at one of its limits (lock table,
// connections, memory, statement_timeout: store.ErrUnavailable) and a busy
// resource (store.ErrBusy) are 503 with Retry-After, never 500.
func TestDatabaseLimitIs503(t *testing.T) {
	t.Parallel()
	for _, sentinel := range []error{store.ErrUnavailable, store.ErrBusy} {
		p := toProblem(fmt.Errorf("dead letter redrive: %w (out of shared memory)", sentinel))
		require.Equal(t, http.StatusServiceUnavailable, p.Status, "%v", sentinel)
		require.Equal(t, codeUnavailable, p.Code)
		require.Equal(t, "1", p.header.Get("Retry-After"))
	}
}
