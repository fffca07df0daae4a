package handlers

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// A backfill that could not finish is a 503 to retry (it is the
// database's slowness, not the client's mistake, nor an internal error),
// and its detail says what was kept, unlike other busy answers ("nothing
// was written").
func TestBackfillStoppedProblem(t *testing.T) {
	p := toProblem(fmt.Errorf("subscription seek: %w", store.ErrBackfillStopped))
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	require.Equal(t, codeUnavailable, p.Code)
	require.Equal(t, "1", p.header.Get("Retry-After"))
	require.Contains(t, p.Detail, "seek to the same start")
}
