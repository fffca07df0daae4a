package console_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/store"
)

// browser is one headless Chromium shared by a test's subtests; each
// session gets a browser context of its own (its own cookies).
type browser struct {
	t       *testing.T
	ctx     context.Context
	shots   string
	dialogs atomic.Int32
}

// chromiumPath is Debian's chromium (.ci/run installs it).
func chromiumPath(t *testing.T) string {
	for _, p := range []string{os.Getenv("FERRY_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	p, err := exec.LookPath("chromium")
	require.NoError(t, err, "the browser tests need Chromium: apt-get install -y chromium (see .ci/run)")
	return p
}

func newBrowser(t *testing.T) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox,
		chromedp.WindowSize(1200, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	require.NoError(t, chromedp.Do(ctx)) // starts the browser
	shots := os.Getenv("FERRY_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))
	return &browser{t: t, ctx: ctx, shots: shots}
}

// session opens a tab in a browser context of its own; any JavaScript
// dialog opened in it (script that ran) is counted.
func (b *browser) session(t *testing.T) context.Context {
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx))
	go func() {
		for _, err := range chromedp.Events(ctx, cdppage.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			b.dialogs.Add(1)
			_, _ = chromedp.Call(ctx, cdppage.HandleJavaScriptDialog, cdppage.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return ctx
}

// do runs steps with a deadline.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(c, steps...))
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s, err := chromedp.Run(c, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err)
	return strings.TrimSpace(s)
}

func location(t *testing.T, ctx context.Context) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	return s
}

// shot saves a full-page PNG of the tab as name.
func (b *browser) shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644))
}

// signIn signs in through the form.
func signIn(t *testing.T, ctx context.Context, base, secret string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), secret), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("queues")))
}

// forge submits a form the page does not have (as another site or a
// crafted request would), with the given fields, and waits for the
// answer's page.
func forge(t *testing.T, ctx context.Context, action string, fields map[string]string) {
	t.Helper()
	var b strings.Builder
	b.WriteString(`(() => { const f = document.createElement('form'); f.method = 'post'; f.action = '` + action + `';`)
	for k, v := range fields {
		b.WriteString(`{ const i = document.createElement('input'); i.name = '` + k + `'; i.value = '` + v + `'; f.appendChild(i); }`)
	}
	b.WriteString(`document.body.appendChild(f); f.submit(); return true; })()`)
	do(t, ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](b.String())(ctx, tg)
		return err
	}), chromedp.WaitVisible(chromedp.ID("error")))
}

// TestConsoleInBrowser drives the console in a real Chromium against a
// real Ferry: sign in, navigate, redrive dead letters and see them back
// in the queue, a read-only key refused an action, a form without its
// CSRF token refused, a revoked key signed out; and no script of the
// data's ever runs. It saves screenshots of the main pages
// (FERRY_SCREENSHOTS names a directory to keep them).
func TestConsoleInBrowser(t *testing.T) {
	env := ferrytest.Start(t, func(c *server.Config) { c.SampleEvery = time.Hour }) // sampled by seedConsole alone
	seedConsole(t, env)
	b := newBrowser(t)
	base := env.URL

	t.Run("SignInNavigateRedrive", func(t *testing.T) {
		ctx := b.session(t)
		signIn(t, ctx, base, ferrytest.AdminKey)
		require.Contains(t, text(t, ctx, "#trouble"), "orders")
		b.shot(t, ctx, "overview")
		do(t, ctx, chromedp.Click(chromedp.CSS(`#queues a[href="/ui/queues/orders"]`)), chromedp.WaitVisible(chromedp.ID("dead-letters")))
		require.Equal(t, "3", text(t, ctx, "#dead_letters"))
		require.Contains(t, text(t, ctx, "#messages"), `"<script>alert(\"body\")</script>"`, "the body (a JSON string) shows as text")
		require.Contains(t, text(t, ctx, "#dead-letters"), "payment declined")
		charts, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("#charts")))
		require.NoError(t, err)
		require.Regexp(t, `<polyline points="\d`, charts, "a line with points")
		b.shot(t, ctx, "queue")
		do(t, ctx, chromedp.Click(chromedp.ID("redrive-all")), chromedp.WaitVisible(chromedp.ID("confirm")))
		require.Equal(t, "3", str(stats(t, env, "orders")["dead_letters"]), "nothing before the confirmation")
		do(t, ctx, chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("done")))
		require.Contains(t, text(t, ctx, "#done"), "3 redriven")
		do(t, ctx, chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.ID("stats")))
		require.Equal(t, "0", text(t, ctx, "#dead_letters"))
		require.Equal(t, "4", text(t, ctx, "#available"))

		do(t, ctx, chromedp.Navigate(base+"/ui/topics/events"), chromedp.WaitVisible(chromedp.ID("events")))
		require.Contains(t, text(t, ctx, "#events"), "order.created")
		b.shot(t, ctx, "topic")
		do(t, ctx, chromedp.Click(chromedp.CSS(`#groups a`)), chromedp.WaitVisible(chromedp.ID("lag")))
		b.shot(t, ctx, "group")
		do(t, ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+"/ui/queues/orders"), chromedp.WaitVisible(chromedp.ID("stats")))
		b.shot(t, ctx, "queue-phone")
	})

	t.Run("ReadOnlyRefusedAndCSRF", func(t *testing.T) {
		ctx := b.session(t)
		_, ro := newKey(t, env, "queue:orders", "read", "receive")
		signIn(t, ctx, base, ro)
		do(t, ctx, chromedp.Navigate(base+"/ui/queues/orders"), chromedp.WaitVisible(chromedp.ID("stats")))
		html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("main")))
		require.NoError(t, err)
		require.NotContains(t, html, "Purge")
		require.NotContains(t, html, "Redrive")
		token, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('input[name=csrf]').value`))
		require.NoError(t, err)
		forge(t, ctx, "/ui/queues/orders/purge", map[string]string{"csrf": token, "confirm": "yes"})
		require.Contains(t, text(t, ctx, "#error"), "queue:orders manage")

		admin := b.session(t)
		signIn(t, admin, base, ferrytest.AdminKey)
		forge(t, admin, "/ui/queues/orders/purge", map[string]string{"confirm": "yes"})
		require.Contains(t, text(t, admin, "#error"), "CSRF")
		require.Equal(t, "4", str(stats(t, env, "orders")["available"]), "neither purged anything")
	})

	t.Run("RevokedKeySignedOut", func(t *testing.T) {
		ctx := b.session(t)
		id, secret := newKey(t, env, "queue:*", "read")
		signIn(t, ctx, base, secret)
		rest(t, env, "DELETE", "/v1/keys/"+id, nil, http.StatusNoContent)
		ferrytest.WaitFor(t, 5*time.Second, "the revoked key's session ends", func() bool {
			do(t, ctx, chromedp.Navigate(base+"/ui/"))
			return strings.HasSuffix(location(t, ctx), "/ui/login")
		})
		do(t, ctx, chromedp.WaitVisible(chromedp.ID("key")))
	})
	require.Zero(t, b.dialogs.Load(), "no script of the data ran")
}

// seedConsole makes what the browser test looks at: an hour of traffic
// on a queue and a topic, sampled minute by minute as the server would
// have (so the charts have history), then a queue with dead letters and
// a body holding a script, a topic with events, a subscription and a
// consumer group, and the sample of now.
func seedConsole(t *testing.T, env *ferrytest.Env) {
	rest(t, env, "PUT", "/v1/queues/orders", nil, http.StatusCreated)
	rest(t, env, "PUT", "/v1/queues/billing", nil, http.StatusCreated)
	rest(t, env, "PUT", "/v1/topics/events", map[string]any{"partitions": 2}, http.StatusCreated)
	seedHour(t, env)
	deadLetterAll(t, env, "orders", "payment declined", map[string]any{"order": 1}, map[string]any{"order": 2}, map[string]any{"order": 3})
	rest(t, env, "POST", "/v1/queues/orders/messages", map[string]any{"messages": []any{
		map[string]any{"body": `<script>alert("body")</script>`, "attributes": map[string]any{"type": "order.created"}},
	}}, http.StatusCreated)
	rest(t, env, "PUT", "/v1/topics/events/subscriptions/audit", nil, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/events/events", map[string]any{"events": []any{
		map[string]any{"type": "order.created", "key": "a", "data": map[string]any{"n": 1}},
		map[string]any{"type": "order.paid", "key": "b", "data": map[string]any{"n": 2}},
	}}, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/events/groups/billing/poll", map[string]any{"consumer": "worker-1", "start": "earliest"}, http.StatusOK)
	require.NoError(t, store.SamplesWrite(context.Background(), env.Server.Pool(), time.Time{}))
}

// seedHour sends, receives and acks on orders (leaving it empty), and
// publishes to events, a varying amount each minute of the last hour, each
// minute sampled at that minute.
func seedHour(t *testing.T, env *ferrytest.Env) {
	base := time.Now().Truncate(time.Minute).Add(-time.Hour)
	for i := range 60 {
		n := 2 + (i*7)%9
		msgs := make([]any, n)
		for j := range msgs {
			msgs[j] = map[string]any{"body": map[string]any{"minute": i}}
		}
		rest(t, env, "POST", "/v1/queues/orders/messages", map[string]any{"messages": msgs}, http.StatusCreated)
		if i%10 != 5 { // now and then the consumers fall behind, and catch up
			got := rest(t, env, "POST", "/v1/queues/orders/receive", map[string]any{"max_messages": 100}, http.StatusOK)["messages"].([]any)
			receipts := make([]any, len(got))
			for j, m := range got {
				receipts[j] = m.(map[string]any)["receipt"]
			}
			rest(t, env, "POST", "/v1/queues/orders/ack", map[string]any{"receipts": receipts}, http.StatusOK)
		}
		rest(t, env, "POST", "/v1/topics/events/events", map[string]any{"events": []any{
			map[string]any{"type": "order.created", "key": "h", "data": map[string]any{"minute": i}},
		}}, http.StatusCreated)
		require.NoError(t, store.SamplesWrite(context.Background(), env.Server.Pool(), base.Add(time.Duration(i)*time.Minute)))
	}
}
