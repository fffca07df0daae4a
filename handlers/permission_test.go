package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// testKeys resolves the secrets it was given to their keys.
type testKeys map[string]access.Key

func (k testKeys) Resolve(_ context.Context, secret string) (access.Key, error) {
	if key, ok := k[secret]; ok {
		return key, nil
	}
	return access.Key{}, access.ErrInvalidKey
}

// withKeys is a server option: the admin key and the given keys.
func withKeys(keys testKeys) ferrytest.Option {
	return func(c *server.Config) { c.Resolver = access.Chain(access.NewAdminKey(c.AdminKey), keys) }
}

// scoped is a key with the given permissions (which must parse).
func scoped(t testing.TB, id string, specs ...access.Spec) access.Key {
	t.Helper()
	g, err := access.Parse(specs)
	require.NoError(t, err)
	return access.Key{ID: id, Name: id, Grants: g}
}

func perm(resource string, actions ...string) access.Spec {
	return access.Spec{Resource: resource, Actions: actions}
}

func bearer(secret string) http.Header {
	return http.Header{"Authorization": {"Bearer " + secret}}
}

// routePermission is one /v1 route and the permission it needs, as
// API.md § Access control says.
type routePermission struct {
	method, path string
	kind         access.Kind
	action       access.Action
	list         bool // a list: what it shows is filtered
}

// routePermissions is API.md's table applied to every /v1 route, written
// out independently of handlers.routeRules (whose coverage of the router
// TestEveryRouteHasAPermission checks).
func routePermissions() []routePermission {
	const q, s, g = "/v1/queues/:queue", "/v1/topics/:topic/subscriptions/:sub", "/v1/topics/:topic/groups/:group"
	rs := []routePermission{
		{"GET", "/v1/queues", access.Queue, access.Read, true},
		{"PUT", q, access.Queue, access.Manage, false},
		{"GET", q, access.Queue, access.Read, false},
		{"DELETE", q, access.Queue, access.Manage, false},
		{"POST", q + "/messages", access.Queue, access.Send, false},
		{"DELETE", q + "/messages", access.Queue, access.Manage, false},
		{"POST", q + "/messages/move", access.Queue, access.Manage, false},
		{"GET", "/v1/topics", access.Topic, access.Read, true},
		{"PUT", "/v1/topics/:topic", access.Topic, access.Manage, false},
		{"GET", "/v1/topics/:topic", access.Topic, access.Read, false},
		{"DELETE", "/v1/topics/:topic", access.Topic, access.Manage, false},
		{"POST", "/v1/topics/:topic/events", access.Topic, access.Publish, false},
		{"GET", "/v1/topics/:topic/events", access.Topic, access.Read, false},
		{"GET", "/v1/topics/:topic/subscriptions", access.Subscription, access.Read, true},
		{"PUT", s, access.Subscription, access.Manage, false},
		{"GET", s, access.Subscription, access.Read, false},
		{"DELETE", s, access.Subscription, access.Manage, false},
		{"POST", s + "/seek", access.Subscription, access.Manage, false},
		{"DELETE", s + "/messages", access.Subscription, access.Manage, false},
		{"GET", "/v1/topics/:topic/groups", access.Group, access.Read, true},
		{"GET", g, access.Group, access.Read, false},
		{"DELETE", g, access.Group, access.Manage, false},
		{"POST", g + "/poll", access.Group, access.Consume, false},
		{"POST", g + "/commit", access.Group, access.Consume, false},
		{"POST", g + "/leave", access.Group, access.Consume, false},
		{"POST", g + "/seek", access.Group, access.Manage, false},
	}
	for _, base := range []struct {
		path string
		kind access.Kind
	}{{q, access.Queue}, {s, access.Subscription}} {
		// Whatever reveals bodies or delivers messages needs receive:
		// dead letters are listed, and messages peeked, with it, not with manage.
		for _, r := range []struct{ method, path string }{
			{"POST", "/receive"}, {"POST", "/ack"}, {"POST", "/nack"}, {"POST", "/extend"}, {"GET", "/dead-letters"}, {"GET", "/messages"},
		} {
			rs = append(rs, routePermission{r.method, base.path + r.path, base.kind, access.Receive, false})
		}
		for _, r := range []struct{ method, path string }{
			{"DELETE", "/dead-letters"}, {"POST", "/dead-letters/redrive"},
			{"POST", "/rotate-secret"}, {"POST", "/enable"}, {"GET", "/attempts"},
		} {
			rs = append(rs, routePermission{r.method, base.path + r.path, base.kind, access.Manage, false})
		}
	}
	return rs
}

// concrete is the route's path for queue q1, topic t1, subscription s1
// and group g1, with the name of its resource.
func (r routePermission) concrete() (path, name string) {
	path = strings.NewReplacer(":queue", "q1", ":topic", "t1", ":sub", "s1", ":group", "g1").Replace(r.path)
	switch r.kind {
	case access.Queue:
		name = "q1"
	case access.Topic:
		name = "t1"
	case access.Subscription:
		name = "t1/s1"
	case access.Group:
		name = "t1/g1"
	}
	if r.list && (r.kind == access.Subscription || r.kind == access.Group) {
		name = "t1/*"
	}
	return path, name
}

// allowing is a key with just the permission r needs.
func (r routePermission) allowing(t testing.TB, id string) access.Key {
	_, name := r.concrete()
	return scoped(t, id, perm(string(r.kind)+":"+name, string(r.action)))
}

// denying is a key with every permission near r's but the one it needs:
// every other action on the same resource but those that imply it, and
// every action of the other kinds that do not reach it.
func (r routePermission) denying(t testing.TB, id string) access.Key {
	_, name := r.concrete()
	if r.list && strings.HasSuffix(name, "/*") {
		name = "t1/s1"
		if r.kind == access.Group {
			name = "t1/g1"
		}
	}
	var acts []string
	for _, a := range access.Actions(r.kind) {
		implies := a == access.Manage && (r.action == access.Read || r.kind == access.Group && r.action == access.Consume)
		if a != r.action && !implies {
			acts = append(acts, string(a))
		}
	}
	specs := []access.Spec{perm(string(r.kind)+":"+name, acts...)}
	if r.list && strings.Contains(name, "/") {
		specs = []access.Spec{perm(string(r.kind)+":t2/*", "*"), perm(string(r.kind)+":"+name, acts...)}
	}
	// Other kinds, on the same names, that never imply r's permission.
	specs = append(specs, perm("admin", "*"))
	if r.kind != access.Queue {
		specs = append(specs, perm("queue:*", "*"))
	}
	if r.kind == access.Subscription || r.kind == access.Group {
		// Reading the topic lets a key list its subscriptions and groups
		// (those it may read: maybe none).
		if r.list {
			specs = append(specs, perm("topic:t1", "publish"))
		} else {
			specs = append(specs, perm("topic:t1", "publish", "read"))
		}
	}
	if r.kind == access.Queue {
		specs = append(specs, perm("topic:*", "*"), perm("subscription:*/*", "*"), perm("group:*/*", "*"))
	}
	if r.kind == access.Topic {
		specs = append(specs, perm("subscription:t1/*", "*"), perm("group:t1/*", "*"))
	}
	if r.kind == access.Subscription {
		specs = append(specs, perm("group:t1/*", "*"), perm("topic:t2", "*"))
	}
	if r.kind == access.Group {
		specs = append(specs, perm("subscription:t1/*", "*"), perm("topic:t2", "*"))
	}
	return scoped(t, id, specs...)
}

// Every route of API.md's table: a key with just its permission gets past
// the check (whatever the handler then says: the resources do not exist),
// and a key with everything but it gets 403 `forbidden` naming it, before
// any existence check (nothing here exists, and no 404 comes).
func TestRoutePermissions(t *testing.T) {
	t.Parallel()
	routes := routePermissions()
	keys := testKeys{}
	for i, r := range routes {
		if r.list && (r.kind == access.Queue || r.kind == access.Topic) {
			continue // never refused: filtered (TestListsShowOnlyWhatTheKeyMayRead)
		}
		keys[fmt.Sprint("allow-", i)] = r.allowing(t, fmt.Sprint("allow-", i))
		keys[fmt.Sprint("deny-", i)] = r.denying(t, fmt.Sprint("deny-", i))
	}
	env := ferrytest.Start(t, withKeys(keys))
	for i, r := range routes {
		path, name := r.concrete()
		if _, ok := keys[fmt.Sprint("allow-", i)]; !ok {
			continue
		}
		got := env.DoWith(r.method, path, nil, bearer(fmt.Sprint("allow-", i)))
		require.NotEqual(t, http.StatusForbidden, got.Status, "%s %s with %s:%s %s: %s", r.method, path, r.kind, name, r.action, got.Body)
		require.NotEqual(t, http.StatusUnauthorized, got.Status, "%s %s: %s", r.method, path, got.Body)

		got = env.DoWith(r.method, path, `{}`, bearer(fmt.Sprint("deny-", i)))
		p := requireProblem(t, got, http.StatusForbidden, "forbidden")
		want := fmt.Sprintf("%s:%s %s", r.kind, name, r.action)
		require.Contains(t, p["detail"], want, "%s %s", r.method, path)
	}
}

// The admin key and scoped keys share the 401s: no key, an unknown key, an
// expired key.
func TestScopedKeyUnauthorized(t *testing.T) {
	t.Parallel()
	expired := scoped(t, "old", perm("queue:*", "*"))
	expired.ExpiresAt = time.Now().Add(-time.Second)
	env := ferrytest.Start(t, withKeys(testKeys{"old": expired, "ok": scoped(t, "ok", perm("queue:*", "*"))}))
	for _, h := range []http.Header{{}, bearer("nobody"), bearer("old")} {
		requireProblem(t, env.DoWith("GET", "/v1/queues/q1", nil, h), http.StatusUnauthorized, "unauthorized")
	}
	require.Equal(t, http.StatusNotFound, env.DoWith("GET", "/v1/queues/q1", nil, bearer("ok")).Status)
}

// keyPages GETs every page of the list at path with limit, as the key with
// secret, and returns the names it shows, page by page; every page but
// the last is full, and only the last has a null next.
func keyPages(t *testing.T, env *ferrytest.Env, path, member, secret string, limit int) [][]string {
	t.Helper()
	var pages [][]string
	after := ""
	for {
		url := fmt.Sprintf("%s?limit=%d", path, limit)
		if after != "" {
			url += "&after=" + after
		}
		r := env.DoWith("GET", url, nil, bearer(secret))
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", url, r.Body)
		var page struct {
			Next *string `json:"next"`
		}
		m := r.Map(t)
		r.JSON(t, &page)
		require.IsType(t, []any{}, m[member], "%s: %s is an array: %s", url, member, r.Body)
		var names []string
		for _, x := range m[member].([]any) {
			names = append(names, x.(map[string]any)["name"].(string))
		}
		pages = append(pages, names)
		require.LessOrEqual(t, len(names), limit)
		if page.Next == nil {
			return pages
		}
		require.Len(t, names, limit, "%s: a page that is followed by another is full", url)
		require.Less(t, len(pages), 100, "paging never ends")
		after = *page.Next
	}
}

// Lists show only what the key may read (API.md § Access control), in
// full pages: a key that reads a few names among many unreadable ones
// still gets them all, in order, with next null only on the last page
// and no empty page after it.
func TestListsShowOnlyWhatTheKeyMayRead(t *testing.T) {
	t.Parallel()
	keys := testKeys{
		"queues":  scoped(t, "queues", perm("queue:a-*", "read"), perm("queue:c-*", "manage"), perm("queue:b-0007", "send")),
		"a-only":  scoped(t, "a-only", perm("queue:a-*", "read")),
		"nothing": scoped(t, "nothing", perm("subscription:*/*", "*"), perm("topic:x*", "publish")),
		"topics":  scoped(t, "topics", perm("topic:t-*", "read"), perm("queue:*", "send")),
		"subs": scoped(t, "subs", perm("subscription:t-1/s-a*", "read"),
			perm("group:t-1/g-a*", "manage"), perm("topic:t-2", "manage")),
	}
	env := ferrytest.Start(t, withKeys(keys))
	for _, q := range []string{"a-1", "a-2", "a-3", "c-1", "c-2", "ab"} {
		putQueue(t, env, q, nil)
	}
	// More unreadable queues between the readable ones than a list reads
	// at once (1000): filtering reads on to the c-* queues.
	conn := dbConn(t, env.DatabaseURL)
	_, err := conn.Exec(context.Background(),
		`INSERT INTO ferry.queues (name) SELECT 'b-' || lpad(i::text, 4, '0') FROM generate_series(1, 1100) i`)
	require.NoError(t, err)

	require.Equal(t, [][]string{{"a-1", "a-2"}, {"a-3", "c-1"}, {"c-2"}}, keyPages(t, env, "/v1/queues", "queues", "queues", 2))
	require.Equal(t, [][]string{{"a-1", "a-2", "a-3"}, {"c-1", "c-2"}}, keyPages(t, env, "/v1/queues", "queues", "queues", 3))
	require.Equal(t, [][]string{{"a-1", "a-2", "a-3"}}, keyPages(t, env, "/v1/queues", "queues", "a-only", 3),
		"no next when no readable queue follows, however many unreadable ones do")
	require.Equal(t, [][]string{{"a-1"}, {"a-2"}, {"a-3"}}, keyPages(t, env, "/v1/queues", "queues", "a-only", 1))
	require.Equal(t, [][]string(nil), nilIfEmpty(keyPages(t, env, "/v1/queues", "queues", "nothing", 100)))
	admin := keyPages(t, env, "/v1/queues", "queues", ferrytest.AdminKey, 1000)
	require.Len(t, admin, 2, "the admin key sees every queue")
	require.Len(t, admin[0], 1000)

	for _, tp := range []string{"t-1", "t-2", "u-1"} {
		call[map[string]any](t, env, "PUT", "/v1/topics/"+tp, nil, nil, http.StatusCreated)
	}
	require.Equal(t, [][]string{{"t-1"}, {"t-2"}}, keyPages(t, env, "/v1/topics", "topics", "topics", 1))
	require.Equal(t, [][]string(nil), nilIfEmpty(keyPages(t, env, "/v1/topics", "topics", "nothing", 10)))

	for _, tp := range []string{"t-1", "t-2"} {
		for _, s := range []string{"s-a1", "s-b1", "s-a2"} {
			call[map[string]any](t, env, "PUT", "/v1/topics/"+tp+"/subscriptions/"+s, nil, nil, http.StatusCreated)
		}
		for _, g := range []string{"g-a1", "g-b1", "g-a2"} {
			call[map[string]any](t, env, "POST", "/v1/topics/"+tp+"/groups/"+g+"/poll", map[string]any{"consumer": "w"}, nil, http.StatusOK)
		}
	}
	require.Equal(t, [][]string{{"s-a1", "s-a2"}}, keyPages(t, env, "/v1/topics/t-1/subscriptions", "subscriptions", "subs", 2))
	require.Equal(t, [][]string{{"s-a1"}, {"s-a2"}}, keyPages(t, env, "/v1/topics/t-1/subscriptions", "subscriptions", "subs", 1))
	require.Equal(t, [][]string{{"s-a1", "s-a2", "s-b1"}}, keyPages(t, env, "/v1/topics/t-2/subscriptions", "subscriptions", "subs", 5),
		"topic manage reads every subscription of the topic")
	require.Equal(t, [][]string{{"g-a1"}, {"g-a2"}}, keyPages(t, env, "/v1/topics/t-1/groups", "groups", "subs", 1))
	require.Equal(t, [][]string{{"g-a1", "g-a2", "g-b1"}}, keyPages(t, env, "/v1/topics/t-2/groups", "groups", "subs", 5))

	// A key that may read the topic but none of its subscriptions or
	// groups gets empty lists, not a 403 (issue 18 item 7); for a topic
	// that does not exist, the 404 that GET of the topic answers it too.
	for _, member := range []string{"subscriptions", "groups"} {
		path := "/v1/topics/t-1/" + member
		require.Equal(t, [][]string(nil), nilIfEmpty(keyPages(t, env, path, member, "topics", 10)), path)
		requireProblem(t, env.DoWith("GET", "/v1/topics/t-9/"+member, nil, bearer("topics")), http.StatusNotFound, "not_found")
	}

	// A topic's list for a key that may read neither the topic nor any of
	// its subscriptions or groups is a 403 before the topic is looked up
	// (no 404 for u-1 nor for a topic that does not exist).
	for _, path := range []string{"/v1/topics/u-1/groups", "/v1/topics/nope/groups"} {
		p := requireProblem(t, env.DoWith("GET", path, nil, bearer("subs")), http.StatusForbidden, "forbidden")
		require.Contains(t, p["detail"], "group:"+strings.Split(path, "/")[3]+"/* read")
	}
	for _, path := range []string{"/v1/topics/u-1/subscriptions", "/v1/topics/nope/subscriptions"} {
		p := requireProblem(t, env.DoWith("GET", path, nil, bearer("topics")), http.StatusForbidden, "forbidden")
		require.Contains(t, p["detail"], "subscription:"+strings.Split(path, "/")[3]+"/* read")
	}
}

// nilIfEmpty is nil for the one empty page of an empty list.
func nilIfEmpty(pages [][]string) [][]string {
	if len(pages) == 1 && len(pages[0]) == 0 {
		return nil
	}
	return pages
}

// Path spellings (encoded names, empty and extra segments, every method)
// never give a key of team a a 2xx on team b.
func TestAccessPathSpellings(t *testing.T) {
	t.Parallel()
	k := scoped(t, "a", perm("queue:team-a*", "*"), perm("subscription:team-a/*", "*"), perm("topic:team-a*", "read"), perm("group:team-a/*", "*"))
	env := ferrytest.Start(t, withKeys(testKeys{"a": k}))
	env.Do("PUT", "/v1/queues/team-b", `{}`)
	env.Do("PUT", "/v1/topics/team-b", `{}`)
	env.Do("PUT", "/v1/topics/team-b/subscriptions/s", `{}`)
	env.Do("PUT", "/v1/queues/team-a", `{}`)
	env.Do("PUT", "/v1/topics/team-a", `{}`)
	for _, p := range []string{
		"/v1/queues/team-b", "/v1/queues/team-b/", "/v1/queues/team-a%2F..%2Fteam-b", "/v1/queues/team-a/../team-b",
		"/v1/queues/team-%62", "/v1/queues//", "/v1/queues/", "/v1/topics/team-b/subscriptions/s",
		"/v1/topics/team-b/subscriptions/", "/v1/topics/team-a/subscriptions/", "/v1/topics/team-a/subscriptions//receive",
		"/v1/topics/team-a%2Fx/subscriptions/s", "/v1/topics/team-b/subscriptions/s/dead-letters",
		"/v1/topics/team-b/groups/", "/v1/topics/team-b/events", "/v1/topics/team-b", "/v1/topics/team-b/",
		"/v1/keys", "/v1/keys/", "/v1/audit", "/v1/audit/", "/v1/topics/team-a/subscriptions/s%2F..%2F..%2Fteam-b",
	} {
		for _, m := range []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH"} {
			r := rawDo(t, env, m, p, []byte(`{}`), bearer("a"))
			ok := r.Status >= 200 && r.Status < 300
			if m == "OPTIONS" && r.Status == http.StatusNoContent {
				ok = false // Echo's route-level Allow answer: no name, no data
			}
			if ok {
				t.Errorf("%s %s: %d %s", m, p, r.Status, r.Body)
			}
		}
	}
	require.Equal(t, http.StatusOK, env.Do("GET", "/v1/queues/team-b", nil).Status)
}

// pushURLsSeen maps the names in the answer of GET path (one resource or a
// list under member) to their push.url as the key with secret sees it.
func pushURLsSeen(t *testing.T, env *ferrytest.Env, path, member, secret string) map[string]string {
	t.Helper()
	r := env.DoWith("GET", path, nil, bearer(secret))
	require.Equal(t, http.StatusOK, r.Status, "%s: %s", path, r.Body)
	m := r.Map(t)
	items := []any{m}
	if member != "" {
		items = m[member].([]any)
	}
	out := map[string]string{}
	for _, x := range items {
		o := x.(map[string]any)
		out[o["name"].(string)] = o["push"].(map[string]any)["url"].(string)
	}
	return out
}

// A key that may not manage a queue or subscription sees its push.url
// with the query's values masked (issue 18 item 7: tokens live there), in
// GETs and lists alike, resource by resource; a key that may manage it,
// the topic's manage included, and the admin key see it whole.
func TestPushURLQueryMaskedWithoutManage(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush, withKeys(testKeys{
		"reader": scoped(t, "reader", perm("queue:*", "read"), perm("subscription:*/*", "read")),
		"mixed":  scoped(t, "mixed", perm("queue:*", "read"), perm("queue:q2", "manage"), perm("topic:t1", "manage")),
	}))
	const (
		url1 = "http://127.0.0.1:9/hook/q1?token=s3cret&v=2&bare&empty=&=x"
		url2 = "http://127.0.0.1:9/hook/q2?sig=abc%20def"
		url3 = "http://127.0.0.1:9/plain/path"
	)
	putTopic(t, env, "t1", nil, http.StatusCreated)
	for path, url := range map[string]string{qpath("q1"): url1, qpath("q2"): url2, qpath("q3"): url3, tpath("t1", "/subscriptions/s1"): url1} {
		r := env.Do("PUT", path, map[string]any{"push": map[string]any{"url": url}})
		require.Equal(t, http.StatusCreated, r.Status, "%s: %s", path, r.Body)
	}
	masked1 := "http://127.0.0.1:9/hook/q1?token=***&v=***&***&empty=***&=***"
	masked2 := "http://127.0.0.1:9/hook/q2?sig=***"

	require.Equal(t, map[string]string{"q1": masked1}, pushURLsSeen(t, env, qpath("q1"), "", "reader"))
	require.Equal(t, map[string]string{"q1": masked1, "q2": masked2, "q3": url3}, pushURLsSeen(t, env, "/v1/queues", "queues", "reader"))
	require.Equal(t, map[string]string{"s1": masked1}, pushURLsSeen(t, env, tpath("t1", "/subscriptions/s1"), "", "reader"))
	require.Equal(t, map[string]string{"s1": masked1}, pushURLsSeen(t, env, tpath("t1", "/subscriptions"), "subscriptions", "reader"))

	require.Equal(t, map[string]string{"q2": url2}, pushURLsSeen(t, env, qpath("q2"), "", "mixed"))
	require.Equal(t, map[string]string{"q1": masked1, "q2": url2, "q3": url3}, pushURLsSeen(t, env, "/v1/queues", "queues", "mixed"))
	require.Equal(t, map[string]string{"s1": url1}, pushURLsSeen(t, env, tpath("t1", "/subscriptions"), "subscriptions", "mixed"))

	require.Equal(t, map[string]string{"q1": url1, "q2": url2, "q3": url3}, pushURLsSeen(t, env, "/v1/queues", "queues", ferrytest.AdminKey))
	require.Equal(t, map[string]string{"s1": url1}, pushURLsSeen(t, env, tpath("t1", "/subscriptions/s1"), "", ferrytest.AdminKey))
}

// A long poll re-checks its key before each claim or read after a wait:
// a key deleted or expired while the poll is parked gets the 401 a new
// request would, and what arrives meanwhile is left for another key.

// longPollCase is one kind of long poll: the permissions its key needs,
// the resource it waits on, the request, what wakes it (the id of what it
// would deliver), and the read, with another key, that finds that still
// there.
type longPollCase struct {
	name  string
	perms []any
	setup func(t *testing.T, env *ferrytest.Env)
	poll  func(env *ferrytest.Env, secret string) asyncResult
	wake  func(t *testing.T, env *ferrytest.Env) string
	still func(t *testing.T, env *ferrytest.Env, secret string) []string
}

func longPollCases() []longPollCase {
	return []longPollCase{{
		name:  "queue receive",
		perms: []any{kperm("queue:lq", "receive")},
		setup: func(t *testing.T, env *ferrytest.Env) { putQueue(t, env, "lq", nil) },
		poll: func(env *ferrytest.Env, secret string) asyncResult {
			return doAsyncAs(env, secret, "POST", qpath("lq", "/receive"), map[string]any{"wait_seconds": 10})
		},
		wake: func(t *testing.T, env *ferrytest.Env) string { return send(t, env, "lq", msg("m"))[0].ID },
		still: func(t *testing.T, env *ferrytest.Env, secret string) []string {
			got, err := decodeReceived(doAsyncAs(env, secret, "POST", qpath("lq", "/receive"), nil))
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, 1, got[0].ReceiveCount, "never claimed before")
			return msgIDs(got)
		},
	}, {
		name:  "subscription receive",
		perms: []any{kperm("subscription:st/s", "receive")},
		setup: func(t *testing.T, env *ferrytest.Env) {
			putTopic(t, env, "st", map[string]any{"partitions": 1}, http.StatusCreated)
			putSub(t, env, "st", "s", nil, http.StatusCreated)
		},
		poll: func(env *ferrytest.Env, secret string) asyncResult {
			return doAsyncAs(env, secret, "POST", spath("st", "s", "/receive"), map[string]any{"wait_seconds": 10})
		},
		wake: func(t *testing.T, env *ferrytest.Env) string { return publishEvents(t, env, "st", evt("x"))[0].ID },
		still: func(t *testing.T, env *ferrytest.Env, secret string) []string {
			res := doAsyncAs(env, secret, "POST", spath("st", "s", "/receive"), nil)
			requireOK(t, res)
			got := decodeSubMessages(t, res.body)
			require.Len(t, got, 1)
			require.Equal(t, 1, got[0].ReceiveCount, "never claimed before")
			return subIDs(got)
		},
	}, {
		name:  "event read",
		perms: []any{kperm("topic:et", "read")},
		setup: func(t *testing.T, env *ferrytest.Env) {
			putTopic(t, env, "et", map[string]any{"partitions": 1}, http.StatusCreated)
		},
		poll: func(env *ferrytest.Env, secret string) asyncResult {
			return doAsyncAs(env, secret, "GET", tpath("et", "/events")+"?partition=0&wait_seconds=10", nil)
		},
		wake: func(t *testing.T, env *ferrytest.Env) string { return publishEvents(t, env, "et", evt("x"))[0].ID },
		still: func(t *testing.T, env *ferrytest.Env, secret string) []string {
			res := doAsyncAs(env, secret, "GET", tpath("et", "/events")+"?partition=0", nil)
			requireOK(t, res)
			return pluck(decodePage(t, res.body).Events, func(e client.Event) string { return e.ID })
		},
	}, {
		name:  "group poll",
		perms: []any{kperm("group:gt/g", "consume")},
		setup: func(t *testing.T, env *ferrytest.Env) {
			putTopic(t, env, "gt", map[string]any{"partitions": 1}, http.StatusCreated)
		},
		poll: func(env *ferrytest.Env, secret string) asyncResult {
			return doAsyncAs(env, secret, "POST", gpath("gt", "g", "/poll"), map[string]any{"consumer": "a", "wait_seconds": 10})
		},
		wake: func(t *testing.T, env *ferrytest.Env) string { return publishEvents(t, env, "gt", evt("x"))[0].ID },
		still: func(t *testing.T, env *ferrytest.Env, secret string) []string {
			// The same member, with another key: its fetch position did not
			// move past the event.
			res := doAsyncAs(env, secret, "POST", gpath("gt", "g", "/poll"), map[string]any{"consumer": "a"})
			requireOK(t, res)
			got, err := decodeGroupPoll(res.body)
			require.NoError(t, err)
			return pluck(got.Events, func(e client.Event) string { return e.ID })
		},
	}}
}

// keyRefused reports whether a fresh request with the key's secret gets
// 401 (a list: any valid key may ask for it).
func keyRefused(env *ferrytest.Env, secret string) bool {
	return env.DoWith("GET", "/v1/queues", nil, bearer(secret)).Status == http.StatusUnauthorized
}

// requirePollRefused requires a long poll's answer to be the 401 of an
// invalid key.
func requirePollRefused(t *testing.T, res asyncResult, what string) {
	t.Helper()
	require.NoError(t, res.err)
	requireUnauthorized(t, res.response(), what)
}

// A key deleted while its long poll is parked: the poll answers 401 when
// it wakes, and what woke it is left for another key.
func TestLongPollKeyDeletedWhileParked(t *testing.T) {
	t.Parallel()
	for _, tc := range longPollCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := ferrytest.Start(t)
			tc.setup(t, env)
			doomed := createKey(t, env, "doomed", nil, tc.perms...)
			other := createKey(t, env, "other", nil, tc.perms...)
			done := parked(t, tc.name, env, func() asyncResult { return tc.poll(env, doomed.Secret) })
			require.Equal(t, http.StatusNoContent, env.Do("DELETE", "/v1/keys/"+doomed.ID, nil).Status)
			ferrytest.WaitFor(t, 5*time.Second, "the deleted key to be refused", func() bool { return keyRefused(env, doomed.Secret) })
			id := tc.wake(t, env)
			requirePollRefused(t, <-done, tc.name)
			require.Equal(t, []string{id}, tc.still(t, env, other.Secret))
		})
	}
}

// A key that expires while its long poll is parked: the poll answers 401
// when it wakes, and the message is left for another key.
func TestLongPollKeyExpiresWhileParked(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	tc := longPollCases()[0]
	tc.setup(t, env)
	expires := time.Now().Add(3 * time.Second)
	short := createKey(t, env, "short", &expires, tc.perms...)
	other := createKey(t, env, "other", nil, tc.perms...)
	done := parked(t, tc.name, env, func() asyncResult { return tc.poll(env, short.Secret) })
	ferrytest.WaitFor(t, 10*time.Second, "the key to expire", func() bool { return keyRefused(env, short.Secret) })
	require.False(t, time.Now().Before(expires), "refused before it expired")
	id := tc.wake(t, env)
	requirePollRefused(t, <-done, tc.name)
	require.Equal(t, []string{id}, tc.still(t, env, other.Secret))
}
