package handlers_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

var auditEntryKeys = []string{"at", "key_id", "key_name", "action", "resource", "request_id", "client_request_id", "status", "push_change"}

// auditPage GETs a page of the audit log with the admin key.
func auditPage(t testing.TB, env *ferrytest.Env, query string) client.AuditList {
	t.Helper()
	l, err := api(env).ListAuditLog(t.Context(), pageOf(t, query))
	require.NoError(t, err, "audit log%s", query)
	require.NotNil(t, l.Entries)
	return *l
}

// auditCount counts the audit log's entries, all of them or those of the
// requests that sent one X-Request-Id.
func auditCount(t testing.TB, env *ferrytest.Env, clientRequestID string) int {
	t.Helper()
	var n int
	err := dbConn(t, env.DatabaseURL).QueryRow(context.Background(),
		`SELECT count(*) FROM ferry.audit_log WHERE $1 = '' OR client_request_id = $1`, clientRequestID).Scan(&n)
	require.NoError(t, err)
	return n
}

// auditStep is one request to an audited route and the entry it must
// write.
type auditStep struct {
	method, path string
	body         any
	secret       string // "" for the admin key
	status       int    // the status it must get; 0: any (the entry must name it)
	action       string
	resource     string
}

// Every audited route writes exactly one entry, with the key's id and
// name, the action, the resource, the request id and the status answered,
// whether it succeeded or failed (400, 403, 404 and 409 alike). The
// steps run in order on one server: each creates what the next needs.
func TestAuditedRoutesRecordOneEntryEach(t *testing.T) {
	t.Parallel()
	keys := testKeys{
		"deployer": scoped(t, "key_7", perm("queue:q3", "manage"), perm("queue:q2", "read")),
	}
	keys["deployer"] = withName(keys["deployer"], "deployer")
	env := ferrytest.Start(t, withKeys(keys))
	const q, s, g = "/v1/queues/q1", "/v1/topics/t1/subscriptions/s1", "/v1/topics/t1/groups/g1"
	steps := []auditStep{
		{"PUT", q, map[string]any{}, "", 201, "queue.put", "queue:q1"},
		{"PUT", q, map[string]any{"visibility_timeout_seconds": 60}, "", 200, "queue.put", "queue:q1"},
		{"PUT", q, map[string]any{"bogus": 1}, "", 400, "queue.put", "queue:q1"},
		{"DELETE", q + "/messages", nil, "", 204, "messages.purge", "queue:q1"},
		{"DELETE", q + "/dead-letters", nil, "", 204, "dead_letters.purge", "queue:q1"},
		{"POST", q + "/dead-letters/redrive", map[string]any{"limit": 10}, "", 200, "dead_letters.redrive", "queue:q1"},
		{"POST", q + "/rotate-secret", nil, "", 0, "push.rotate_secret", "queue:q1"},
		{"POST", q + "/enable", nil, "", 0, "push.enable", "queue:q1"},
		{"PUT", "/v1/topics/t1", map[string]any{}, "", 201, "topic.put", "topic:t1"},
		{"PUT", s, map[string]any{}, "", 201, "subscription.put", "subscription:t1/s1"},
		{"POST", s + "/seek", map[string]any{"to": "earliest"}, "", 204, "subscription.seek", "subscription:t1/s1"},
		{"DELETE", s + "/dead-letters", nil, "", 204, "dead_letters.purge", "subscription:t1/s1"},
		{"DELETE", s + "/messages", nil, "", 204, "messages.purge", "subscription:t1/s1"},
		{"POST", s + "/dead-letters/redrive", map[string]any{"limit": 10}, "", 200, "dead_letters.redrive", "subscription:t1/s1"},
		{"POST", s + "/rotate-secret", nil, "", 0, "push.rotate_secret", "subscription:t1/s1"},
		{"POST", s + "/enable", nil, "", 0, "push.enable", "subscription:t1/s1"},
		{"POST", g + "/seek", map[string]any{"to": "earliest"}, "", 404, "group.seek", "group:t1/g1"},
		{"DELETE", g, nil, "", 404, "group.delete", "group:t1/g1"},
		{"DELETE", s, nil, "", 204, "subscription.delete", "subscription:t1/s1"},
		{"DELETE", "/v1/topics/t1", nil, "", 204, "topic.delete", "topic:t1"},
		{"DELETE", q, nil, "", 204, "queue.delete", "queue:q1"},
		{"DELETE", q, nil, "", 404, "queue.delete", "queue:q1"},
		{"PUT", "/v1/queues/q2", map[string]any{}, "deployer", 403, "queue.put", "queue:q2"},
		{"PUT", "/v1/queues/q3", map[string]any{}, "deployer", 201, "queue.put", "queue:q3"},
		{"DELETE", "/v1/queues/q3/dead-letters", nil, "deployer", 204, "dead_letters.purge", "queue:q3"},
		// Reading dead letters is recorded too (issue 18 item 3): it
		// shows bodies no consumer received.
		{"GET", "/v1/queues/q3/dead-letters", nil, "", 200, "dead_letters.list", "queue:q3"},
		{"GET", "/v1/queues/q3/dead-letters", nil, "deployer", 403, "dead_letters.list", "queue:q3"},
		{"GET", "/v1/queues/q9/dead-letters", nil, "", 404, "dead_letters.list", "queue:q9"},
	}
	for i, st := range steps {
		id := fmt.Sprintf("audit-step-%d", i)
		secret, keyID, keyName := ferrytest.AdminKey, "admin", "FERRY_ADMIN_KEY"
		if st.secret != "" {
			secret, keyID, keyName = st.secret, keys[st.secret].ID, keys[st.secret].Name
		}
		h := bearer(secret)
		h.Set("X-Request-Id", id)
		r := env.DoWith(st.method, st.path, st.body, h)
		if st.status != 0 {
			require.Equal(t, st.status, r.Status, "%s %s: %s", st.method, st.path, r.Body)
		}
		require.Equal(t, 1, auditCount(t, env, id), "%s %s writes exactly one entry", st.method, st.path)
		got := auditPage(t, env, "?limit=1").Entries
		require.Len(t, got, 1)
		require.WithinDuration(t, time.Now(), got[0].At, time.Minute)
		got[0].At = time.Time{}
		require.Equal(t, client.AuditEntry{KeyID: keyID, KeyName: keyName, Action: st.action, Resource: st.resource,
			RequestID: r.Header.Get("X-Request-Id"), ClientRequestID: &id, Status: r.Status}, got[0], "%s %s", st.method, st.path)
	}
	require.Equal(t, len(steps), auditCount(t, env, ""), "one entry per audited request, and none for the rest")

	// A group is created by its first poll, which is recorded (later polls
	// are not); then its seek and delete succeed, and are recorded so.
	call[map[string]any](t, env, "PUT", "/v1/topics/t2", nil, nil, http.StatusCreated)
	for range 2 {
		call[map[string]any](t, env, "POST", "/v1/topics/t2/groups/g1/poll", map[string]any{"consumer": "w"}, nil, http.StatusOK)
	}
	requireNoContent(t, env.Do("POST", "/v1/topics/t2/groups/g1/seek", map[string]any{"to": "earliest"}), "group seek")
	requireNoContent(t, env.Do("DELETE", "/v1/topics/t2/groups/g1", nil), "group delete")
	got := auditPage(t, env, "?limit=4").Entries
	require.Equal(t, []string{"group.delete", "group.seek", "group.create", "topic.put"}, pluck(got, func(e client.AuditEntry) string { return e.Action }))
	require.Equal(t, []int{204, 204, 200, 201}, pluck(got, func(e client.AuditEntry) int { return e.Status }))
	for _, e := range got[:3] {
		require.Equal(t, "group:t2/g1", e.Resource)
	}
}

// withName is key k named name.
func withName(k access.Key, name string) access.Key {
	k.Name = name
	return k
}

// The hot paths (send, receive, ack, nack, extend, publish, poll, commit,
// leave) and every read but of dead letters write no audit entry; neither
// does a request without a valid key (401).
func TestHotPathsAreNotAudited(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "q1", map[string]any{"visibility_timeout_seconds": 30})
	call[map[string]any](t, env, "PUT", "/v1/topics/t1", map[string]any{"partitions": 1}, nil, http.StatusCreated)
	call[map[string]any](t, env, "PUT", "/v1/topics/t1/subscriptions/s1", nil, nil, http.StatusCreated)
	// The poll that creates the group is its creation, and is recorded;
	// the polls after it are not.
	call[map[string]any](t, env, "POST", "/v1/topics/t1/groups/g1/poll", map[string]any{"consumer": "w", "start": "earliest"}, nil, http.StatusOK)
	before := auditCount(t, env, "")
	require.Equal(t, 4, before)

	send(t, env, "q1", msg("a"), msg("b"), msg("c"))
	got := receive(t, env, "q1", map[string]any{"max_messages": 3})
	require.Len(t, got, 3)
	ack(t, env, "q1", got[0].Receipt)
	settle(t, env, "q1", "extend", map[string]any{"receipts": []string{got[1].Receipt}, "visibility_timeout_seconds": 60})
	settle(t, env, "q1", "nack", map[string]any{"receipts": []string{got[1].Receipt, got[2].Receipt}})
	call[map[string]any](t, env, "POST", "/v1/topics/t1/events", map[string]any{"events": []any{map[string]any{"type": "x"}}}, nil, http.StatusCreated)
	poll := call[struct {
		Generation int `json:"generation"`
	}](t, env, "POST", "/v1/topics/t1/groups/g1/poll", map[string]any{"consumer": "w", "start": "earliest"}, nil, http.StatusOK)
	requireNoContent(t, env.Do("POST", "/v1/topics/t1/groups/g1/commit",
		map[string]any{"consumer": "w", "generation": poll.Generation, "offsets": map[string]any{"0": 0}}), "commit")
	requireNoContent(t, env.Do("POST", "/v1/topics/t1/groups/g1/leave", map[string]any{"consumer": "w"}), "leave")
	for _, path := range []string{"/v1/queues", "/v1/queues/q1", "/v1/topics", "/v1/topics/t1",
		"/v1/topics/t1/events?partition=0", "/v1/topics/t1/subscriptions", "/v1/topics/t1/subscriptions/s1",
		"/v1/topics/t1/groups", "/v1/topics/t1/groups/g1", "/v1/audit"} {
		r := env.Do("GET", path, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", path, r.Body)
	}
	// A bad hot-path request is not audited either; nor is a 401.
	require.Equal(t, http.StatusBadRequest, env.Do("POST", qpath("q1", "/messages"), map[string]any{}).Status)
	requireProblem(t, env.DoWith("DELETE", qpath("q1"), nil, bearer("not-a-key")), http.StatusUnauthorized, "unauthorized")
	requireProblem(t, env.DoWith("DELETE", qpath("q1"), nil, nil), http.StatusUnauthorized, "unauthorized")
	require.Equal(t, before, auditCount(t, env, ""))
}

// GET /v1/audit pages newest first with a strict cursor: every entry once,
// in descending order, next null on the last page; a cursor Ferry did not
// issue for this list, a limit out of range or a key without admin is
// refused.
func TestAuditListPages(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, withKeys(testKeys{"ops": scoped(t, "key_3", perm("queue:*", "*"), perm("topic:*", "*"))}))
	for i := range 7 {
		putQueue(t, env, fmt.Sprintf("q%d", i), nil)
	}
	var all []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10, "paging ends")
		query := "?limit=3"
		if after != "" {
			query += "&after=" + after
		}
		p := auditPage(t, env, query)
		all = append(all, pluck(p.Entries, func(e client.AuditEntry) string { return e.Resource })...)
		if p.Next == nil {
			require.Len(t, p.Entries, 1, "the last page holds what is left")
			break
		}
		require.Len(t, p.Entries, 3)
		after = *p.Next
		// An entry written between pages is newer than every one left:
		// the following pages do not show it.
		putQueue(t, env, "late-"+after, nil)
	}
	require.Equal(t, []string{"queue:q6", "queue:q5", "queue:q4", "queue:q3", "queue:q2", "queue:q1", "queue:q0"}, all)
	require.Len(t, auditPage(t, env, "").Entries, 9, "default limit 100 shows all")

	cursor := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, bad := range []string{"x", cursor("queues:q1"), cursor("audit:007"), cursor("audit:0"), cursor("audit:-1"),
		cursor("audit:x"), cursor("audit:99999999999999999999"), cursor("audit:5") + "=", "&after="} {
		requireProblem(t, env.Do("GET", "/v1/audit?after="+bad, nil), http.StatusBadRequest, "invalid_request")
	}
	for _, bad := range []string{"0", "1001", "x"} {
		requireProblem(t, env.Do("GET", "/v1/audit?limit="+bad, nil), http.StatusBadRequest, "invalid_request")
	}
	requireProblem(t, env.Do("GET", "/v1/audit?before=1", nil), http.StatusBadRequest, "invalid_request")
	p := requireProblem(t, env.DoWith("GET", "/v1/audit", nil, bearer("ops")), http.StatusForbidden, "forbidden")
	require.Contains(t, p["detail"], "admin")
	require.Len(t, auditPage(t, env, "?limit=1000").Entries, 9, "reading the log writes nothing")
}

// rawRequestLine sends a request whose path is written byte for byte (a
// Go client would percent-encode it) and returns its status.
func rawRequestLine(t *testing.T, env *ferrytest.Env, method, path, secret string) int {
	t.Helper()
	u, err := url.Parse(env.URL)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nX-Request-Id: probe-utf8\r\nConnection: close\r\n\r\n", method, path, u.Host, secret)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp.StatusCode
}

// An audited request whose path holds a byte that is not UTF-8 (Echo
// routes on the raw path) is recorded all the same: PostgreSQL refused the
// entry, and a key could keep its requests out of the log.
func TestAuditRecordsNonUTF8Path(t *testing.T) {
	t.Parallel()
	var log ferrytest.LogBuffer
	env := ferrytest.StartLogging(t, &log)
	status := rawRequestLine(t, env, "DELETE", "/v1/queues/team-b\xff", ferrytest.AdminKey)
	t.Logf("status %d", status)
	require.Equal(t, 1, auditCount(t, env, "probe-utf8"), "the request was not audited; log: %s", log.String())
}

// auditLast is the newest entry of the audit log.
func auditLast(t *testing.T, env *ferrytest.Env) client.AuditEntry {
	t.Helper()
	got := auditPage(t, env, "?limit=1").Entries
	require.Len(t, got, 1)
	return got[0]
}

func strPtr(s string) *string { return &s }

// The audit log records each push URL change (issue 18 item 3) with the
// host before and after, never the path or query where tokens live: a
// first URL, a change, a refused change (403, recorded all the same),
// a removal; a PUT that changes no URL records none.
func TestAuditPushURLChanges(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush, withKeys(testKeys{"ops": scoped(t, "key_5", perm("queue:q1", "manage"))}))
	putTopic(t, env, "t1", nil, http.StatusCreated)
	push := func(url string) map[string]any { return map[string]any{"push": map[string]any{"url": url}} }
	change := func(from, to *string) *client.PushChange { return &client.PushChange{FromHost: from, ToHost: to} }
	for i, st := range []struct {
		path   string
		body   any
		secret string
		status int
		want   *client.PushChange
	}{
		{qpath("q1"), push("http://127.0.0.1:9/secret-path-a?token=one"), "", 201, change(nil, strPtr("127.0.0.1:9"))},
		{qpath("q1"), map[string]any{"push": map[string]any{"url": "http://127.0.0.1:9/secret-path-a?token=one", "timeout_seconds": 5}}, "", 200, nil},
		{qpath("q1"), map[string]any{"visibility_timeout_seconds": 40}, "", 200, nil},
		{qpath("q1"), push("http://hooks.invalid:8443/secret-path-b?token=two"), "", 200, change(strPtr("127.0.0.1:9"), strPtr("hooks.invalid:8443"))},
		{qpath("q1"), push("http://evil.invalid/secret-path-x?steal=1"), "ops", 403, change(strPtr("hooks.invalid:8443"), strPtr("evil.invalid"))},
		{qpath("q1"), map[string]any{"push": nil}, "ops", 200, change(strPtr("hooks.invalid:8443"), nil)},
		{qpath("q1"), map[string]any{"push": nil}, "", 200, nil},
		{tpath("t1", "/subscriptions/s1"), push("https://[::1]/secret-path-s?token=three"), "", 201, change(nil, strPtr("[::1]"))},
	} {
		secret := ferrytest.AdminKey
		if st.secret != "" {
			secret = st.secret
		}
		r := env.DoWith("PUT", st.path, st.body, bearer(secret))
		require.Equal(t, st.status, r.Status, "step %d: %s", i, r.Body)
		got := auditLast(t, env)
		require.Equal(t, r.Header.Get("X-Request-Id"), got.RequestID, "step %d is the newest entry", i)
		require.Equal(t, st.want, got.PushChange, "step %d", i)
	}
	var leaked int
	err := dbConn(t, env.DatabaseURL).QueryRow(context.Background(),
		`SELECT count(*) FROM ferry.audit_log a WHERE a::text ~ '(token|steal|secret-path)'`).Scan(&leaked)
	require.NoError(t, err)
	require.Zero(t, leaked, "no path or query of a push URL is in the audit log")
}

// Ferry names every request with an id of its own (issue 18 item 7): the
// X-Request-Id it answers, the audit entry's request_id and the log
// line's request_id are Ferry's, unique per request whatever the client
// sends; a sane client X-Request-Id is kept beside it as
// client_request_id, and any other (too long, odd characters) is dropped.
func TestRequestIDsAreFerrys(t *testing.T) {
	t.Parallel()
	var log ferrytest.LogBuffer
	env := ferrytest.StartLogging(t, &log)
	seen := map[string]bool{}
	for i, st := range []struct {
		sent string
		kept *string
	}{
		{"same-id", strPtr("same-id")},
		{"same-id", strPtr("same-id")},
		{strings.Repeat("a", 128), strPtr(strings.Repeat("a", 128))},
		{strings.Repeat("a", 129), nil},
		{"no spaces, please", nil},
		{"", nil},
	} {
		h := bearer(ferrytest.AdminKey)
		if st.sent != "" {
			h.Set("X-Request-Id", st.sent)
		}
		r := env.DoWith("PUT", qpath(fmt.Sprint("q", i)), map[string]any{}, h)
		require.Equal(t, http.StatusCreated, r.Status, r.Body)
		id := r.Header.Get("X-Request-Id")
		require.Regexp(t, `^[0-9a-f]{24}$`, id, "step %d: Ferry's own id, never the client's", i)
		require.False(t, seen[id], "step %d: a new id for each request", i)
		seen[id] = true
		got := auditLast(t, env)
		require.Equal(t, id, got.RequestID, "step %d", i)
		require.Equal(t, st.kept, got.ClientRequestID, "step %d", i)
		ferrytest.WaitFor(t, 5*time.Second, "the request's log line", func() bool { return strings.Contains(log.String(), "request_id="+id) })
		line := logLine(log.String(), "request_id="+id)
		if st.kept != nil {
			require.Contains(t, line, "client_request_id="+*st.kept, "step %d", i)
		} else {
			require.NotContains(t, line, "client_request_id", "step %d", i)
		}
	}
}

// logLine is the first line of log that contains s.
func logLine(log, s string) string {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
