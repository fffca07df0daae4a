package console_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestConsoleRevokedKeySignedOut proves that revoking a key ends its
// console sessions within a second, like its REST requests.
func TestConsoleRevokedKeySignedOut(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	id, secret := newKey(t, env, "queue:*", "read")
	u := newUI(t, env)
	u.signIn(secret)
	require.Equal(t, http.StatusOK, u.get("/ui/").Status)
	rest(t, env, "DELETE", "/v1/keys/"+id, nil, http.StatusNoContent)
	start := time.Now()
	ferrytest.WaitFor(t, 5*time.Second, "the session ends", func() bool { return u.get("/ui/").Status == http.StatusSeeOther })
	require.Less(t, time.Since(start), 2*time.Second)
	require.Equal(t, "/ui/login", u.get("/ui/").Header.Get("Location"))
}
