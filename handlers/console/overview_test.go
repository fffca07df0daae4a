package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/store"
)

// TestConsoleOverviewSearch proves the overview pages and searches by
// name, lists only what the key may read, and puts dead letters first.
func TestConsoleOverviewSearch(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	for i := range 120 {
		rest(t, env, "PUT", "/v1/queues/"+name(i), nil, http.StatusCreated)
	}
	rest(t, env, "PUT", "/v1/queues/other-1", nil, http.StatusCreated)
	deadLetterAll(t, env, name(77), "bad", 1)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	p := u.get("/ui/")
	require.Equal(t, http.StatusOK, p.Status)
	trouble := p.Body[strings.Index(p.Body, `id="trouble"`):strings.Index(p.Body, `id="queues"`)]
	require.Contains(t, trouble, name(77))
	require.Equal(t, 50, strings.Count(p.Body[strings.Index(p.Body, `id="queues"`):], `<a href="/ui/queues/`))
	require.Contains(t, p.Body, "More queues")
	p = u.get("/ui/?q=other")
	require.Contains(t, p.Body, "other-1")
	require.NotContains(t, p.Body, name(1)+"<")

	rest(t, env, "PUT", "/v1/topics/tp", nil, http.StatusCreated)
	for _, sub := range []string{"s1", "hidden"} {
		rest(t, env, "PUT", "/v1/topics/tp/subscriptions/"+sub, nil, http.StatusCreated)
	}
	rest(t, env, "POST", "/v1/topics/tp/events", map[string]any{"events": []any{map[string]any{"type": "x"}}}, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/tp/groups/g1/poll", map[string]any{"consumer": "c"}, http.StatusOK)
	// The group's lag (0: it started at the latest event) is 200 above its
	// sample of a quarter hour ago: it needs attention, and says why.
	_, err := env.Server.Pool().Exec(context.Background(), `INSERT INTO ferry.group_samples (group_id, minute, lag)
		SELECT id, date_trunc('minute', now()) - interval '15 minutes', -200 FROM ferry.consumer_groups WHERE name = 'g1'`)
	require.NoError(t, err)
	p = u.get("/ui/")
	trouble = p.Body[strings.Index(p.Body, `id="trouble"`):strings.Index(p.Body, `id="queues"`)]
	require.Contains(t, trouble, `href="/ui/topics/tp/groups/g1"`)
	require.Contains(t, trouble, "lag up 200 since")
	require.Contains(t, trouble, "1 dead letter<")
	p = u.get("/ui/?q=tp")
	topics := p.Body[strings.Index(p.Body, `id="topics"`):]
	for _, want := range []string{"/ui/topics/tp/subscriptions/s1", "/ui/topics/tp/subscriptions/hidden", "/ui/topics/tp/groups/g1"} {
		require.Contains(t, topics, want)
	}

	m := rest(t, env, "POST", "/v1/keys", map[string]any{"name": "scoped", "permissions": []any{
		map[string]any{"resource": "queue:q-00*", "actions": []string{"read"}},
		map[string]any{"resource": "topic:tp", "actions": []string{"read"}},
		map[string]any{"resource": "subscription:tp/s1", "actions": []string{"read"}},
	}}, http.StatusCreated)
	s := newUI(t, env)
	s.signIn(m["key"].(string))
	p = s.get("/ui/")
	require.Equal(t, 10, strings.Count(p.Body, `<a href="/ui/queues/`), "q-000 to q-009 only")
	require.NotContains(t, p.Body, name(77))
	require.Contains(t, p.Body, "/ui/topics/tp/subscriptions/s1")
	require.NotContains(t, p.Body, "/subscriptions/hidden")
	require.NotContains(t, p.Body, "/groups/g1")
}

func name(i int) string {
	return "q-" + string(rune('0'+i/100)) + string(rune('0'+i/10%10)) + string(rune('0'+i%10))
}

// TestConsoleOverviewTenThousandQueues proves the overview with 10,000
// queues (and a scoped key that may read only the last few): a page, the
// next page, a search and the scoped key's page all answer with what they
// should, and the attention list finds the one queue whose oldest message
// is old among 10,000 that each hold one. A sample of the history reads
// them all and writes one row each, and nothing when run again. The times
// are logged, not asserted (the machine's load decides them); see
// docs/console.md for what a page reads.
func TestConsoleOverviewTenThousandQueues(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.SampleEvery = time.Hour }) // sampled by the test alone
	ctx := context.Background()
	pool := env.Server.Pool()
	_, err := pool.Exec(ctx,
		`INSERT INTO ferry.queues (name) SELECT 'load-' || lpad(g::text, 5, '0') FROM generate_series(1, 10000) g`)
	require.NoError(t, err)
	// Every queue holds a message (so the attention list probes each one's
	// oldest), one of them two hours old; a topic's group has lag.
	start := time.Now()
	_, err = pool.Exec(ctx, `SELECT count(*) FROM ferry.queues q, LATERAL ferry.send(q.name, '1')`)
	require.NoError(t, err)
	t.Logf("10,000 sends through the SQL API: %v", time.Since(start))
	_, err = pool.Exec(ctx, `UPDATE ferry.messages SET sent_at = now() - interval '2 hours'
		WHERE queue_id = (SELECT id FROM ferry.queues WHERE name = 'load-00007')`)
	require.NoError(t, err)
	for range 3 {
		start = time.Now()
		require.NoError(t, store.SamplesWrite(ctx, pool, time.Time{}))
		t.Logf("a sample of 10,000 queues: %v", time.Since(start))
	}
	require.Equal(t, int64(10000), count(t, pool, `SELECT count(*) FROM ferry.queue_samples`), "one sample each: the later runs found nothing changed")
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	_, secret := newKey(t, env, "queue:load-0999*", "read")
	s := newUI(t, env)
	s.signIn(secret)
	for _, c := range []struct {
		ui         *ui
		path, want string
		rows       int
	}{
		{u, "/ui/", "load-00050", 50},
		{u, "/ui/?q=load-0000", "oldest message 2h old (over 1h)", 9},
		{u, "/ui/?after=load-09000", "load-09050", 50},
		{u, "/ui/?q=9876", "load-09876", 1},
		{s, "/ui/", "load-09999", 10},
	} {
		start := time.Now()
		p := c.ui.get(c.path)
		took := time.Since(start)
		require.Equal(t, http.StatusOK, p.Status)
		require.Contains(t, p.Body, c.want, c.path)
		require.Equal(t, c.rows, strings.Count(p.Body[strings.Index(p.Body, `id="queues"`):], `<a href="/ui/queues/`), c.path)
		t.Logf("%s: %v", c.path, took)
	}
}

// count runs a count query.
func count(t testing.TB, pool *pgxpool.Pool, sql string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}
