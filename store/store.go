package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what every store function runs its SQL on: a pool, a connection
// or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TxBeginner is a DBTX that can also open a transaction (a pool or a conn).
type TxBeginner interface {
	DBTX
	Begin(ctx context.Context) (pgx.Tx, error)
}

var (
	// ErrNotFound means the named queue (or other resource) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means the request conflicts with the resource's state.
	ErrConflict = errors.New("conflict")
	// ErrBusy means the request waited too long for a lock held by other
	// work on the same resource; it wrote nothing and can be retried.
	ErrBusy = errors.New("resource busy")
	// ErrUnavailable means the database refused the work at one of its
	// own limits: out of memory or of lock table space
	// (max_locks_per_transaction), too many connections, a configuration
	// limit, or its statement_timeout; nothing of the failed transaction
	// was written (work done in batches keeps the batches committed
	// before). It also means the database could not be reached or the
	// connection to it broke (see connectionLost), as during a failover:
	// then a transaction cut off at its commit may have committed, and a
	// retry is exact only with the same dedup ids or event ids. Either
	// way, the request can be retried later.
	ErrUnavailable = errors.New("database unavailable")
)

// ValidationError is a client mistake found by the store, where the check
// needs the database's state (e.g. a delay longer than the queue's
// retention). Field names the offending input.
type ValidationError struct {
	Field   string
	Message string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Message }

// QueueFullError means a send would take the queue past its max_depth. The
// whole batch was refused; nothing was written.
type QueueFullError struct {
	Depth    int64
	MaxDepth int64
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("queue is full: depth %d, max_depth %d", e.Depth, e.MaxDepth)
}

// errBusyRunAgain is the ErrBusy of a statement that failed only because
// of concurrency: a serialization failure (40001: rows moved under it) or
// a deadlock (40P01). Running it again may pass, where a lock_timeout
// (55P03) would only wait as long again: messageClaimRetried retries this
// one only. Callers see ErrBusy with the same text.
var errBusyRunAgain error = busyRunAgain{}

type busyRunAgain struct{}

func (busyRunAgain) Error() string        { return ErrBusy.Error() }
func (busyRunAgain) Is(target error) bool { return target == ErrBusy }

// interpretError maps pgx errors to the store's sentinels.
func interpretError(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	}
	if connectionLost(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%s: %w (%s)", op, ErrConflict, pgErr.ConstraintName)
		case "23514": // check_violation
			return &ValidationError{Field: pgErr.ConstraintName, Message: "violates constraint"}
		case "55P03": // lock_not_available: a lock_timeout expired
			return fmt.Errorf("%s: %w", op, ErrBusy)
		case "40001", "40P01": // still failing after retry's attempts
			return fmt.Errorf("%s: %w", op, errBusyRunAgain)
		case "57014": // query_canceled: by the server's statement_timeout?
			if strings.Contains(pgErr.Message, "statement timeout") {
				return fmt.Errorf("%s: %w (%s)", op, ErrUnavailable, pgErr.Message)
			}
		case "P0002": // no_data_found, from ferry.raise_not_found
			return fmt.Errorf("%s: %w (%s)", op, ErrNotFound, pgErr.Message)
		}
		// Class 53, insufficient_resources: out_of_memory (53200, also "out
		// of shared memory" when the lock table is full),
		// too_many_connections (53300), configuration_limit_exceeded
		// (53400), disk_full (53100).
		if strings.HasPrefix(pgErr.Code, "53") {
			return fmt.Errorf("%s: %w (%s)", op, ErrUnavailable, pgErr.Message)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// errCreateRaced means another transaction created the row this one meant
// to create; run again, the row is then updated.
var errCreateRaced = errors.New("created concurrently")

// isRetryable reports whether a transaction failed only because of
// concurrency (a deadlock, a serialization failure, a lost creation race)
// and can be run again.
func isRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.Is(err, errCreateRaced) ||
		(errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001"))
}

// connectionLost reports whether err means that no database could be
// reached or that the connection broke: no server answered, the servers
// answering were standbys (refused by target_session_attrs=read-write, or
// a read-only transaction: 25006), the server shut down or crashed under
// the connection (class 08, 57P01-57P03), or the connection was closed.
// A failover shows each of these; none is the request's fault, and all
// pass once a primary answers again. Only what pgx and PostgreSQL return
// is matched: a *pgconn.ConnectError, a *pgconn.PgError of those codes,
// pgx's closed connection and timeout errors, and the two errors pgx
// passes on untyped from a socket that broke in a round trip
// (io.ErrUnexpectedEOF: the server closed it; *net.OpError: a reset, a
// broken pipe). Not io.EOF (pgx turns a read's into io.ErrUnexpectedEOF),
// nor any other net.Error (an HTTP client's or a resolver's), nor every
// pgconn.SafeToRetry error (an argument that failed to encode is one). A
// context ended by the caller is not one either, also when it cancelled a
// connection attempt (connect_timeout ends one with a deadline: that is a
// lost database).
func connectionLost(err error) bool {
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return !errors.Is(err, context.Canceled)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "25006", // read_only_sql_transaction: a standby, not (yet) promoted
			"57P01", // admin_shutdown (also on postmaster death)
			"57P02", // crash_shutdown
			"57P03": // cannot_connect_now: starting up, shutting down, recovering
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection_exception
	}
	var opErr *net.OpError
	return errors.Is(err, pgconn.ErrConnClosed) || pgconn.Timeout(err) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &opErr)
}

// IsUnavailable reports whether err means the database is unavailable:
// [ErrUnavailable], or a lost or unreachable connection (see connectionLost)
// on a path that returned pgx's error as it came. The API answers both
// 503 with Retry-After.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) || connectionLost(err) }

// retryEachAlone reports whether the requests of a merged (group-commit)
// transaction that failed with err are to be written again each on its
// own: the database answered the transaction with an error, so it did not
// commit, and the cause may be one request's own (an unknown queue, a lock
// it waited for, a limit it reached). A lost or unreachable connection
// (connectionLost) is never such a cause: the whole batch fails at once,
// with ErrUnavailable, since every retry would meet the same outage and
// each costs a connect timeout per host when the primary's machine has
// vanished; and a connection that broke mid-way may have committed (pgx
// reports some such breaks as a closed connection, "safe to retry", as it
// reports one closed before anything was sent).
func retryEachAlone(err error) bool {
	if connectionLost(err) {
		return false
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrBusy) || errors.Is(err, ErrUnavailable)
}

// retry runs fn up to three times while it fails with a retryable error.
func retry(ctx context.Context, fn func() error) error { return retryN(ctx, 3, fn) }

// retryN runs fn up to n times while it fails with a retryable error,
// waiting a little (random, growing) between attempts after the second.
func retryN(ctx context.Context, n int, fn func() error) error {
	var err error
	for i := range n {
		if err = fn(); !isRetryable(err) || ctx.Err() != nil {
			return err
		}
		if i >= 1 && i < n-1 {
			t := time.NewTimer(time.Duration(rand.Int64N(int64(i)*int64(2*time.Millisecond)) + 1))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return err
			}
		}
	}
	return err
}

// runBatch sends the statements of b in one round trip. Without an explicit
// transaction, Postgres runs a pipelined batch as one implicit transaction:
// all of it commits or none of it does, and each statement still sees what
// the ones before it did.
func runBatch(ctx context.Context, db DBTX, b *pgx.Batch) error {
	return db.SendBatch(ctx, b).Close()
}

// ShrinkError refuses a PUT that lowers a topic's partitions.
type ShrinkError struct{ From, To int }

func (e *ShrinkError) Error() string {
	return fmt.Sprintf("partitions can only grow (from %d; %d asked)", e.From, e.To)
}

// Unwrap makes a [ShrinkError] an [ErrConflict].
func (e *ShrinkError) Unwrap() error { return ErrConflict }
