package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// ui is a client of the console: a cookie jar, redirects not followed.
type ui struct {
	t   testing.TB
	env *ferrytest.Env
	c   *http.Client
}

// page is one console answer.
type page struct {
	Status int
	Header http.Header
	Body   string
}

func newUI(t testing.TB, env *ferrytest.Env) *ui {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &ui{t: t, env: env, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (u *ui) do(req *http.Request) page {
	u.t.Helper()
	resp, err := u.c.Do(req)
	require.NoError(u.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(u.t, err)
	return page{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

func (u *ui) get(path string) page {
	u.t.Helper()
	req, err := http.NewRequest("GET", u.env.URL+path, nil)
	require.NoError(u.t, err)
	return u.do(req)
}

func (u *ui) post(path string, form url.Values) page {
	u.t.Helper()
	req, err := http.NewRequest("POST", u.env.URL+path, strings.NewReader(form.Encode()))
	require.NoError(u.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return u.do(req)
}

// signIn signs in with secret and requires it to work.
func (u *ui) signIn(secret string) {
	u.t.Helper()
	p := u.post("/ui/login", url.Values{"key": {secret}})
	require.Equal(u.t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(u.t, "/ui/", p.Header.Get("Location"))
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of the page at path.
func (u *ui) csrf(path string) string {
	u.t.Helper()
	p := u.get(path)
	require.Equal(u.t, http.StatusOK, p.Status, p.Body)
	m := csrfRE.FindStringSubmatch(p.Body)
	require.NotNil(u.t, m, "no CSRF token on %s", path)
	return m[1]
}

// rest calls the REST API as the admin and requires status.
func rest(t testing.TB, env *ferrytest.Env, method, path string, body any, status int) map[string]any {
	t.Helper()
	r := env.Do(method, path, body)
	require.Equal(t, status, r.Status, "%s %s: %s", method, path, r.Body)
	if len(r.Body) == 0 {
		return nil
	}
	return r.Map(t)
}

// newKey makes a key with one permission and returns its id and secret.
func newKey(t testing.TB, env *ferrytest.Env, resource string, actions ...string) (string, string) {
	t.Helper()
	m := rest(t, env, "POST", "/v1/keys", map[string]any{"name": "k-" + strings.NewReplacer(":", "-", "*", "x", "/", "-").Replace(resource),
		"permissions": []any{map[string]any{"resource": resource, "actions": actions}}}, http.StatusCreated)
	return m["id"].(string), m["key"].(string)
}

// deadLetterAll sends bodies to queue q, receives them and dead-letters
// them with errText.
func deadLetterAll(t testing.TB, env *ferrytest.Env, q string, errText string, bodies ...any) {
	t.Helper()
	msgs := make([]any, len(bodies))
	for i, b := range bodies {
		msgs[i] = map[string]any{"body": b}
	}
	rest(t, env, "POST", "/v1/queues/"+q+"/messages", map[string]any{"messages": msgs}, http.StatusCreated)
	got := rest(t, env, "POST", "/v1/queues/"+q+"/receive", map[string]any{"max_messages": 100}, http.StatusOK)["messages"].([]any)
	require.Len(t, got, len(bodies))
	receipts := make([]string, len(got))
	for i, m := range got {
		receipts[i] = m.(map[string]any)["receipt"].(string)
	}
	rest(t, env, "POST", "/v1/queues/"+q+"/nack", map[string]any{"receipts": receipts, "dead_letter": true, "error": errText}, http.StatusOK)
}

func stats(t testing.TB, env *ferrytest.Env, q string) map[string]any {
	t.Helper()
	return rest(t, env, "GET", "/v1/queues/"+q, nil, http.StatusOK)["stats"].(map[string]any)
}

func str(v any) string { return fmt.Sprint(v) }
