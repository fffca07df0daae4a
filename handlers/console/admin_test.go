package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestConsoleKeys proves the keys page: a key made there works at once
// and its secret is shown on that answer only; revoking it (after a
// confirmation) ends it.
func TestConsoleKeys(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	token := u.csrf("/ui/keys")
	p := u.post("/ui/keys", url.Values{"csrf": {token}, "name": {"reader"}, "resource": {"queue:*"}, "action": {"read"}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	m := regexp.MustCompile(`id="secret">([^<]+)<`).FindStringSubmatch(p.Body)
	require.NotNil(t, m)
	secret := m[1]
	require.Equal(t, http.StatusOK, env.DoWith("GET", "/v1/queues", nil, http.Header{"Authorization": {"Bearer " + secret}}).Status)
	page := u.get("/ui/keys")
	require.Contains(t, page.Body, "reader")
	require.NotContains(t, page.Body, secret, "shown once")
	id := regexp.MustCompile(`action="/ui/keys/(key_[0-9]+)/revoke"`).FindStringSubmatch(page.Body)[1]

	p = u.post("/ui/keys/"+id+"/revoke", url.Values{"csrf": {token}})
	require.Contains(t, p.Body, `name="confirm" value="yes"`)
	require.Equal(t, http.StatusOK, env.DoWith("GET", "/v1/queues", nil, http.Header{"Authorization": {"Bearer " + secret}}).Status, "not before the confirmation")
	p = u.post("/ui/keys/"+id+"/revoke", url.Values{"csrf": {token}, "confirm": {"yes"}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, http.StatusUnauthorized, env.DoWith("GET", "/v1/queues", nil, http.Header{"Authorization": {"Bearer " + secret}}).Status)
}
