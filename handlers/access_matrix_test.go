package handlers_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/internal/access"
	metricsreg "github.com/ferry-mq/ferry/internal/metrics"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/store"
)

// The access matrix (API.md § Access control; issue 12 item 6), probed
// from outside: two servers on one database, real keys made through POST
// /v1/keys, every route of the router × (no key or an ill-formed
// Authorization, an unknown key, a revoked key, an expired key, a key with
// everything near the route's permission but it, a key with just it), and
// ferry_auth_failures_total counting the refusals.

// everything is every permission there is.
func everything() []access.Spec {
	return []access.Spec{perm("admin", "*"), perm("queue:*", "*"), perm("topic:*", "*"),
		perm("subscription:*/*", "*"), perm("group:*/*", "*")}
}

// matrixRoutes is every /v1 route of the real router (the routes of
// routeRules: TestEveryRouteHasAPermission) with the permission API.md
// gives it: routePermissions and the admin routes. A route of the router
// without one here fails, and so does one here the router lacks.
func matrixRoutes(t *testing.T) []routePermission {
	want := map[string]routePermission{}
	for _, r := range routePermissions() {
		want[r.method+" "+r.path] = r
	}
	for _, k := range []string{"POST /v1/keys", "GET /v1/keys", "GET /v1/keys/:id", "DELETE /v1/keys/:id", "GET /v1/audit"} {
		method, path, _ := strings.Cut(k, " ")
		want[k] = routePermission{method, path, access.Admin, access.All, false}
	}
	e := handlers.New(handlers.Deps{Log: slog.Default(), Metrics: metricsreg.New(nil, slog.Default(), 0), AdminKey: "matrix-admin-key"})
	var out []routePermission
	for _, r := range e.Routes() {
		if !strings.HasPrefix(r.Path, "/v1/") {
			continue
		}
		k := r.Method + " " + r.Path
		rp, ok := want[k]
		require.True(t, ok, "route %s has no permission in API.md's table (routePermissions)", k)
		delete(want, k)
		out = append(out, rp)
	}
	require.Empty(t, want, "permissions of routes the router does not have")
	slices.SortFunc(out, func(a, b routePermission) int { return strings.Compare(a.path+" "+a.method, b.path+" "+b.method) })
	return out
}

// specs are the permissions of a key that allows r (allow) or has
// everything near it but r's permission (deny; nil for a list that is
// filtered, never refused), and the permission a 403 names.
func (r routePermission) specs(t testing.TB) (allow, deny []access.Spec, want string) {
	if r.kind == access.Admin {
		return []access.Spec{perm("admin", "*")}, everything()[1:], "admin"
	}
	_, name := r.concrete()
	allow = access.Specs(r.allowing(t, "allow").Grants)
	if !r.list || r.kind == access.Subscription || r.kind == access.Group {
		deny = access.Specs(r.denying(t, "deny").Grants)
	}
	return allow, deny, fmt.Sprintf("%s:%s %s", r.kind, name, r.action)
}

// matrix is two servers on one database and the keys made on them.
type matrix struct {
	envs [2]*ferrytest.Env
	made map[string]string // secrets by their permissions (JSON)
	// revoked[i] worked on envs[i], then was deleted through the other.
	revoked [2]string
	expired string
	expires time.Time
}

// newMatrix starts the servers and makes the keys that stop working: one
// that expires in a few seconds, and two deleted after use, each through
// the other server than the one it is probed on.
func newMatrix(t *testing.T) *matrix {
	a := ferrytest.Start(t)
	m := &matrix{envs: [2]*ferrytest.Env{a, ferrytest.StartOn(t, a.DatabaseURL)}, made: map[string]string{}}
	m.expires = time.Now().Add(8 * time.Second) // room to make and use it on both servers on a loaded machine
	m.expired = createKey(t, a, "expiring", &m.expires, specsAny(everything())...).Secret
	var ids [2]string
	for i := range m.envs {
		k := createKey(t, a, fmt.Sprint("revoked-", i), nil, specsAny(everything())...)
		ids[i], m.revoked[i] = k.ID, k.Secret
	}
	for i, env := range m.envs {
		for _, secret := range []string{m.expired, m.revoked[i]} {
			r := env.DoWith("GET", "/v1/queues", nil, bearer(secret))
			require.Equal(t, http.StatusOK, r.Status, "the key works (and is cached) on %s: %s", env.URL, r.Body)
		}
	}
	require.True(t, time.Now().Before(m.expires), "the expiring key was used before it expired")
	for i, env := range m.envs {
		requireNoContent(t, m.envs[1-i].Do("DELETE", "/v1/keys/"+ids[i], nil), "revoke through the other server")
		ferrytest.WaitFor(t, time.Second, "the revoked key to be refused on the other server", func() bool {
			return env.DoWith("GET", "/v1/queues", nil, bearer(m.revoked[i])).Status == http.StatusUnauthorized
		})
	}
	return m
}

func specsAny(specs []access.Spec) []any {
	out := make([]any, len(specs))
	for i, s := range specs {
		out[i] = s
	}
	return out
}

// key is the secret of a real key with exactly these permissions, made
// (once) through POST /v1/keys with the admin key.
func (m *matrix) key(t *testing.T, specs []access.Spec) string {
	raw, err := json.Marshal(specs)
	require.NoError(t, err)
	if s, ok := m.made[string(raw)]; ok {
		return s
	}
	k := createKey(t, m.envs[len(m.made)%2], fmt.Sprint("matrix-", len(m.made)), nil, specsAny(specs)...)
	m.made[string(raw)] = k.Secret
	return k.Secret
}

// authFailures sums ferry_auth_failures_total of both servers by reason.
func (m *matrix) authFailures(t *testing.T) map[string]float64 {
	out := map[string]float64{}
	for _, env := range m.envs {
		samples, _ := metrics(t, env)
		for _, reason := range []string{"missing", "invalid", "forbidden"} {
			v, ok := samples[`ferry_auth_failures_total{reason="`+reason+`"}`]
			require.True(t, ok, "ferry_auth_failures_total{reason=%q} is exported", reason)
			out[reason] += v
		}
	}
	return out
}

// requireDelta requires the counts of ferry_auth_failures_total to have
// moved from before by exactly want.
func (m *matrix) requireDelta(t *testing.T, before, want map[string]float64) {
	t.Helper()
	after := m.authFailures(t)
	for _, reason := range []string{"missing", "invalid", "forbidden"} {
		require.Equal(t, want[reason], after[reason]-before[reason], "ferry_auth_failures_total{reason=%q}", reason)
	}
}

// illFormed are Authorization headers that carry no Bearer key: 401 and
// counted as missing, whatever follows the scheme.
func illFormed(secret string) []http.Header {
	return []http.Header{{}, {"Authorization": {"Basic Zm9vOmJhcg=="}}, {"Authorization": {"Bearer"}},
		{"Authorization": {"Token " + secret}}, {"Authorization": {secret}}}
}

// requireUnauthorized requires a 401 `unauthorized` with a challenge.
func requireUnauthorized(t *testing.T, r ferrytest.Response, what string) {
	t.Helper()
	requireProblem(t, r, http.StatusUnauthorized, "unauthorized")
	require.Contains(t, r.Header.Get("WWW-Authenticate"), "Bearer", what)
}

// probe sends route r's request to env with every kind of key, and
// returns the failures it expects counted.
func (m *matrix) probe(t *testing.T, i int, r routePermission, allow, deny, want string) map[string]float64 {
	env := m.envs[i%2]
	path, _ := r.concrete()
	path = strings.ReplaceAll(path, ":id", "key_999999")
	what := fmt.Sprintf("%s %s on server %d", r.method, path, i%2)
	var body any
	if r.method == "POST" || r.method == "PUT" {
		body = `{}`
	}
	counted := map[string]float64{}
	for _, h := range illFormed(allow) {
		requireUnauthorized(t, env.DoWith(r.method, path, body, h), what+" with "+fmt.Sprint(h))
		counted["missing"]++
	}
	for _, secret := range []string{store.NewKeySecret(), m.revoked[i%2], m.expired} {
		requireUnauthorized(t, env.DoWith(r.method, path, body, bearer(secret)), what)
		counted["invalid"]++
	}
	if deny != "" {
		p := requireProblem(t, env.DoWith(r.method, path, body, bearer(deny)), http.StatusForbidden, "forbidden")
		require.Contains(t, p["detail"], want, what)
		counted["forbidden"]++
	}
	got := env.DoWith(r.method, path, body, bearer(allow))
	require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, got.Status,
		"%s with just %s: %s", what, want, got.Body)
	return counted
}

// Every route, on either of two servers, with real keys: 401 for no key,
// an unknown, a revoked and an expired one; 403 naming the permission for
// a key with everything but it; neither for a key with just it. Some of
// the resources the paths name exist, others not: the check comes first.
func TestAccessMatrix(t *testing.T) {
	t.Parallel()
	m := newMatrix(t)
	a := m.envs[0]
	putQueue(t, a, "q1", nil)
	putTopic(t, a, "t1", nil, http.StatusCreated)
	putSub(t, a, "t1", "s1", nil, http.StatusCreated)
	routes := matrixRoutes(t)
	type keys struct{ allow, deny, want string }
	ks := make([]keys, len(routes))
	for i, r := range routes {
		allow, deny, want := r.specs(t)
		ks[i] = keys{allow: m.key(t, allow), want: want}
		if deny != nil {
			ks[i].deny = m.key(t, deny)
		}
	}
	t.Logf("%d routes, %d keys", len(routes), len(m.made))
	for i, env := range m.envs {
		ferrytest.WaitFor(t, 20*time.Second, "the expiring key to be refused", func() bool {
			return env.DoWith("GET", "/v1/queues", nil, bearer(m.expired)).Status == http.StatusUnauthorized
		})
		require.True(t, time.Now().After(m.expires), "refused on server %d only once expired", i)
	}

	before := m.authFailures(t)
	want := map[string]float64{}
	for i, r := range routes {
		for reason, n := range m.probe(t, i, r, ks[i].allow, ks[i].deny, ks[i].want) {
			want[reason] += n
		}
	}
	require.Positive(t, want["forbidden"])
	m.requireDelta(t, before, want)
}

// A key for team A's queues and topics (a-*) never sees or touches team
// B's queue b-q or topic b-t: not in the lists, and 403 for get, send,
// receive, dead letters, attempts, purge, delete and the event log, on
// either server; b-q keeps its message.
func TestAccessTeamIsolation(t *testing.T) {
	t.Parallel()
	a := ferrytest.Start(t)
	m := &matrix{envs: [2]*ferrytest.Env{a, ferrytest.StartOn(t, a.DatabaseURL)}, made: map[string]string{}}
	for _, q := range []string{"a-q1", "a-q2", "b-q"} {
		putQueue(t, a, q, nil)
	}
	send(t, a, "b-q", msg("secret of b"))
	for _, tp := range []string{"a-t", "b-t"} {
		putTopic(t, a, tp, nil, http.StatusCreated)
	}
	publishEvents(t, a, "b-t", evt("b.happened"))
	teamA := m.key(t, []access.Spec{perm("queue:a-*", "*"), perm("topic:a-*", "*")})
	require.Equal(t, http.StatusCreated, sendOne(m.envs[1], "a-q1", teamA).Status, "the key works on its own queues")

	before := m.authFailures(t)
	probes := []struct{ method, path, want string }{
		{"GET", qpath("b-q"), "queue:b-q read"},
		{"POST", qpath("b-q", "/messages"), "queue:b-q send"},
		{"POST", qpath("b-q", "/receive"), "queue:b-q receive"},
		{"GET", qpath("b-q", "/dead-letters"), "queue:b-q receive"},
		{"POST", qpath("b-q", "/dead-letters/redrive"), "queue:b-q manage"},
		{"GET", qpath("b-q", "/attempts"), "queue:b-q manage"},
		{"DELETE", qpath("b-q", "/messages"), "queue:b-q manage"},
		{"DELETE", qpath("b-q"), "queue:b-q manage"},
		{"GET", tpath("b-t"), "topic:b-t read"},
		{"GET", tpath("b-t", "/events"), "topic:b-t read"},
		{"POST", tpath("b-t", "/events"), "topic:b-t publish"},
	}
	for i, p := range probes {
		env := m.envs[i%2]
		got := requireProblem(t, env.DoWith(p.method, p.path, `{}`, bearer(teamA)), http.StatusForbidden, "forbidden")
		require.Contains(t, got["detail"], p.want, "%s %s", p.method, p.path)
		require.Equal(t, [][]string{{"a-q1", "a-q2"}}, keyPages(t, env, "/v1/queues", "queues", teamA, 100))
		require.Equal(t, [][]string{{"a-t"}}, keyPages(t, env, "/v1/topics", "topics", teamA, 100))
	}
	m.requireDelta(t, before, map[string]float64{"forbidden": float64(len(probes))})
	q := call[client.Queue](t, a, "GET", qpath("b-q"), nil, nil, http.StatusOK)
	require.Equal(t, int64(1), q.Stats.Available, "b-q keeps its message")
}

// pushURLNow is the push.url of the queue or subscription at path as the
// admin key sees it ("" for none, or when there is no such target).
func pushURLNow(t *testing.T, env *ferrytest.Env, path string) string {
	t.Helper()
	r := env.Do("GET", path, nil)
	if r.Status == http.StatusNotFound {
		return ""
	}
	require.Equal(t, http.StatusOK, r.Status, "%s: %s", path, r.Body)
	push, _ := r.Map(t)["push"].(map[string]any)
	if push == nil {
		return ""
	}
	return push["url"].(string)
}

// pushStep is one PUT of a push test: the key (by name), the target's
// path, the body, the status it must get, what a 403 must name, and the
// push URL the target must have afterwards.
type pushStep struct {
	key, path string
	body      any
	status    int
	missing   string
	after     string
}

// Whatever delivers messages needs receive (issue 18 item 3): a PUT that
// sets a push URL the queue or subscription does not push to yet (a first
// one too) needs manage and receive. On either of two servers, with real
// keys: a key with manage alone gets 403 naming `<kind>:<name> receive`
// (before the URL is checked, and for a target that does not exist
// before any 404 or creation) and nothing changes, while it may still
// repeat the current URL, change other settings and remove push; manage
// and receive, or the topic's manage, may set a new URL. The refusals are
// counted as forbidden.
func TestAccessPushURLNeedsReceive(t *testing.T) {
	t.Parallel()
	a := ferrytest.Start(t, allowPrivatePush)
	m := &matrix{envs: [2]*ferrytest.Env{a, ferrytest.StartOn(t, a.DatabaseURL, allowPrivatePush)}, made: map[string]string{}}
	const urlA, urlB = "http://127.0.0.1:9/a?token=one", "http://127.0.0.1:9/b?token=two"
	putTopic(t, a, "t1", nil, http.StatusCreated)
	for _, path := range []string{qpath("q1"), tpath("t1", "/subscriptions/s1")} {
		r := a.Do("PUT", path, map[string]any{"push": map[string]any{"url": urlA}})
		require.Equal(t, http.StatusCreated, r.Status, "%s: %s", path, r.Body)
	}
	keys := map[string]string{
		"manage":         m.key(t, []access.Spec{perm("queue:q*", "manage"), perm("subscription:t*/*", "manage")}),
		"manage+receive": m.key(t, []access.Spec{perm("queue:q*", "manage", "receive"), perm("subscription:t*/*", "manage", "receive")}),
		"receive":        m.key(t, []access.Spec{perm("queue:q*", "receive"), perm("subscription:t*/*", "receive")}),
		"topic manage":   m.key(t, []access.Spec{perm("topic:t1", "manage")}),
	}
	push := func(fields ...any) map[string]any {
		p := map[string]any{}
		for i := 0; i < len(fields); i += 2 {
			p[fields[i].(string)] = fields[i+1]
		}
		return map[string]any{"push": p}
	}
	var steps []pushStep
	for _, tg := range []struct{ path, other, missing, missingOther string }{
		{qpath("q1"), qpath("q-new"), "queue:q1 receive", "queue:q-new receive"},
		{tpath("t1", "/subscriptions/s1"), tpath("t-none", "/subscriptions/s1"), "subscription:t1/s1 receive", "subscription:t-none/s1 receive"},
	} {
		steps = append(steps,
			pushStep{"manage", tg.path, push("url", urlB), http.StatusForbidden, tg.missing, urlA},
			// Refused before the URL is checked: no 400 for a bad one.
			pushStep{"manage", tg.path, push("url", "ftp://nowhere"), http.StatusForbidden, tg.missing, urlA},
			pushStep{"manage+receive", tg.path, push("url", "ftp://nowhere"), http.StatusBadRequest, "", urlA},
			// Before the target's existence: no 201, and no 404 for a
			// topic that does not exist.
			pushStep{"manage", tg.other, push("url", urlA), http.StatusForbidden, tg.missingOther, ""},
			pushStep{"receive", tg.path, push("url", urlA), http.StatusForbidden, strings.Replace(tg.missing, "receive", "manage", 1), urlA},
			// What changes no URL needs manage only.
			pushStep{"manage", tg.path, push("url", urlA, "timeout_seconds", 5), http.StatusOK, "", urlA},
			pushStep{"manage", tg.path, map[string]any{"visibility_timeout_seconds": 45}, http.StatusOK, "", urlA},
			pushStep{"manage", tg.path, push("timeout_seconds", 6), http.StatusOK, "", urlA},
			pushStep{"manage+receive", tg.path, push("url", urlB), http.StatusOK, "", urlB},
			pushStep{"manage", tg.path, map[string]any{"push": nil}, http.StatusOK, "", ""},
			// A first URL is a new one.
			pushStep{"manage", tg.path, push("url", urlB), http.StatusForbidden, tg.missing, ""},
		)
	}
	steps = append(steps, pushStep{"topic manage", tpath("t1", "/subscriptions/s1"), push("url", urlA), http.StatusOK, "", urlA})

	before := m.authFailures(t)
	forbidden := 0
	for i, st := range steps {
		env := m.envs[i%2]
		what := fmt.Sprintf("step %d: PUT %s %v with %s", i, st.path, st.body, st.key)
		r := env.DoWith("PUT", st.path, st.body, bearer(keys[st.key]))
		require.Equal(t, st.status, r.Status, "%s: %s", what, r.Body)
		if st.status == http.StatusForbidden {
			forbidden++
			require.Contains(t, requireProblem(t, r, http.StatusForbidden, "forbidden")["detail"], st.missing, what)
		}
		require.Equal(t, st.after, pushURLNow(t, a, st.path), what)
	}
	require.Equal(t, http.StatusNotFound, a.Do("GET", qpath("q-new"), nil).Status, "the refused PUT created nothing")
	m.requireDelta(t, before, map[string]float64{"forbidden": float64(forbidden)})
}
