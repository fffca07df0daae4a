package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestInterpretLimits: errors PostgreSQL raises at its own limits become
// ErrUnavailable (503 + Retry-After), a lock_timeout ErrBusy, and the
// transaction counts as rolled back. (TestDatabaseLimitsAreRetryable meets
// the ones a test can cause safely for real; exhausting the lock table, as
// TestRedriveManyGroupsConcurrently did before redrives were batched,
// would disturb the other tests sharing the server.)
func TestInterpretLimits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code, message string
		want          error
	}{
		{"53200", "out of shared memory", ErrUnavailable},
		{"53200", "out of memory", ErrUnavailable},
		{"53300", "sorry, too many clients already", ErrUnavailable},
		{"53400", "configuration limit exceeded", ErrUnavailable},
		{"53100", "could not extend file: No space left on device", ErrUnavailable},
		{"57014", "canceling statement due to statement timeout", ErrUnavailable},
		{"55P03", "canceling statement due to lock timeout", ErrBusy},
		{"57014", "canceling statement due to user request", nil},
	} {
		pgErr := &pgconn.PgError{Code: c.code, Message: c.message}
		err := interpretError("op", fmt.Errorf("wrapped: %w", pgErr))
		if c.want != nil {
			require.ErrorIs(t, err, c.want, "%s %s", c.code, c.message)
		} else {
			require.False(t, errors.Is(err, ErrUnavailable) || errors.Is(err, ErrBusy), "%s %s: %v", c.code, c.message, err)
		}
		require.True(t, rolledBack(err), "%s: rolled back", c.code)
	}
}
