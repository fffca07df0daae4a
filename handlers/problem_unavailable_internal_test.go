package handlers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// TestLostDatabaseIs503: a connection error that reached the handlers as
// pgx returned it (a path without store's interpretError, such as PUT's
// transaction) is 503 with Retry-After too, not 500: it is what every
// request meets during a database failover.
func TestLostDatabaseIs503(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig("postgres://postgres@127.0.0.1:1/db?sslmode=disable&connect_timeout=5")
	require.NoError(t, err)
	_, refused := pgx.ConnectConfig(context.Background(), cfg) // nothing listens on port 1
	require.Error(t, refused)
	for _, err := range []error{
		fmt.Errorf("queue put: %w", refused),
		fmt.Errorf("group poll: %w", io.ErrUnexpectedEOF),
		fmt.Errorf("queue put: %w", &pgconn.PgError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"}),
	} {
		p := toProblem(err)
		require.Equal(t, http.StatusServiceUnavailable, p.Status, "%v", err)
		require.Equal(t, codeUnavailable, p.Code)
		require.Equal(t, "1", p.header.Get("Retry-After"))
	}
}
