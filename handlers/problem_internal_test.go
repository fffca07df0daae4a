package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
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

// TestNotTheDatabaseIsNot503: an error that wraps io.EOF or a network
// error but does not come from the database is not "the database is
// unavailable": an echo.HTTPError (c.Bind of a truncated body wraps
// io.ErrUnexpectedEOF) keeps its own status, an HTTP client's or a
// resolver's error is not a lost database, and a connection attempt cut
// short by the request's own context (the client left while pgx dialed)
// is the client leaving, answered as any other (499, logged at debug).
func TestNotTheDatabaseIsNot503(t *testing.T) {
	t.Parallel()
	bind := echo.NewHTTPError(http.StatusBadRequest, "unexpected EOF").SetInternal(io.ErrUnexpectedEOF)
	p := toProblem(fmt.Errorf("queue put: %w", bind))
	assert.Equal(t, http.StatusBadRequest, p.Status, "%v", bind)
	assert.Equal(t, codeInvalid, p.Code)

	for _, err := range []error{
		&url.Error{Op: "Post", URL: "https://example.invalid/", Err: errors.New("tls: handshake failure")},
		&net.DNSError{Err: "server misbehaving", Name: "example.invalid", IsTemporary: true},
		fmt.Errorf("body: %w", io.EOF),
	} {
		assert.NotEqual(t, http.StatusServiceUnavailable, toProblem(err).Status, "%v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg, err := pgx.ParseConfig("postgres://postgres@127.0.0.1:1/db?sslmode=disable&connect_timeout=5")
	require.NoError(t, err)
	_, gone := pgx.ConnectConfig(ctx, cfg)
	var connectErr *pgconn.ConnectError
	require.ErrorAs(t, gone, &connectErr)
	require.ErrorIs(t, gone, context.Canceled)
	e := echo.New()
	req := httptest.NewRequest(http.MethodPut, "/v1/queues/q", nil).WithContext(ctx)
	rec := httptest.NewRecorder()
	errorHandler(slog.New(slog.DiscardHandler))(fmt.Errorf("queue put: %w", gone), e.NewContext(req, rec))
	require.Equal(t, 499, rec.Code, "%s", rec.Body)
}

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
