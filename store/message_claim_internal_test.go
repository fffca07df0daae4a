package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClaimGaveUp holds the claim's retry budget: a claim that met rows
// moved under it stops only when it has run claimAttempts times and for
// claimPatience both, so neither a burst of fast failures nor one slow
// attempt ends it early.
func TestClaimGaveUp(t *testing.T) {
	t.Parallel()
	require.False(t, claimGaveUp(1, 0))
	require.False(t, claimGaveUp(claimAttempts-1, time.Hour), "one run short of the attempts")
	require.False(t, claimGaveUp(claimAttempts, claimPatience-time.Millisecond), "ten fast runs: not yet")
	require.False(t, claimGaveUp(100, time.Second), "many fast runs: not yet")
	require.True(t, claimGaveUp(claimAttempts, claimPatience))
	require.True(t, claimGaveUp(claimAttempts+5, time.Minute))
}
