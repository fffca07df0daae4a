package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestConsoleEscapesEverything proves that names, bodies, attributes and
// errors holding markup are shown as text: no <script> of theirs reaches
// a page.
func TestConsoleEscapesEverything(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	rest(t, env, "PUT", "/v1/queues/xss", nil, http.StatusCreated)
	deadLetterAll(t, env, "xss", `<script>alert("err")</script>`, map[string]any{"html": `<script>alert("dl")</script>`})
	rest(t, env, "POST", "/v1/queues/xss/messages", map[string]any{"messages": []any{
		map[string]any{"body": `<script>alert("body")</script>`, "attributes": map[string]any{"a": `<img src=x onerror=alert(1)>`}},
	}}, http.StatusCreated)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	p := u.get("/ui/queues/xss")
	require.Equal(t, http.StatusOK, p.Status)
	require.NotContains(t, p.Body, "<script")
	require.NotContains(t, p.Body, "<img")
	require.Contains(t, p.Body, `&lt;script&gt;alert(\&#34;body\&#34;)&lt;/script&gt;`, "the body shows as written, as text")
	require.Contains(t, p.Body, `&lt;script&gt;alert(&#34;err&#34;)&lt;/script&gt;`)

	// A search or a name with markup is text too, and an unknown one a
	// readable 404 page.
	p = u.get("/ui/?q=" + url.QueryEscape(`"><script>x</script>`))
	require.Equal(t, http.StatusOK, p.Status)
	require.NotContains(t, p.Body, "<script")
	p = u.get("/ui/queues/" + url.PathEscape(`<script>x</script>`))
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.NotContains(t, p.Body, "<script")
	require.Contains(t, p.Header.Get("Content-Type"), "text/html")
	p = u.get("/ui/queues/nope")
	require.Equal(t, http.StatusNotFound, p.Status)
	require.Contains(t, p.Body, `id="error"`)
	require.Equal(t, http.StatusNotFound, u.get("/ui/no/such/page").Status)
}
