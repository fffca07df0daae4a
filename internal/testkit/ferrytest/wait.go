package ferrytest

import (
	"testing"
	"time"
)

// WaitFor polls cond every 20 ms until it holds, failing the test (what
// names the awaited thing) once d has passed.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
