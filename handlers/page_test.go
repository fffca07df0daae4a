package handlers_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// listPath adds limit (0 = none) and after ("" = none) to a list route.
func listPath(path string, limit int, after string) string {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		q.Set("after", after)
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// listPage gets one page of a list route (member names its array) and
// returns the names on it and its next cursor ("" when null), checking the
// page's shape: exactly the array and next, at most limit items.
func listPage(t testing.TB, env *ferrytest.Env, path, member string, limit int, after string) ([]string, string) {
	t.Helper()
	r := env.Do("GET", listPath(path, limit, after), nil)
	require.Equal(t, http.StatusOK, r.Status, "GET %s: %s", listPath(path, limit, after), r.Body)
	m := r.Map(t)
	requireKeys(t, m, []string{member, "next"}, member+" page")
	items, ok := m[member].([]any)
	require.True(t, ok, "%s is an array, never null: %s", member, r.Body)
	if limit == 0 {
		limit = 100
	}
	require.LessOrEqual(t, len(items), limit, "page of %s", path)
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = it.(map[string]any)["name"].(string)
	}
	if m["next"] == nil {
		return names, ""
	}
	next, ok := m["next"].(string)
	require.True(t, ok && next != "", "next is a cursor or null: %s", r.Body)
	require.Len(t, items, limit, "a page that is not the last is full")
	return names, next
}

// listAll pages through a list route with the given limit (0 = the
// default) and returns every name listed, in order, and the page count.
func listAll(t testing.TB, env *ferrytest.Env, path, member string, limit int) ([]string, int) {
	t.Helper()
	var all []string
	after := ""
	for pages := 1; ; pages++ {
		names, next := listPage(t, env, path, member, limit, after)
		all = append(all, names...)
		if next == "" {
			return all, pages
		}
		require.Less(t, pages, 10000, "paging %s does not end", path)
		after = next
	}
}

// sqlNames runs a query that returns names, in its order.
func sqlNames(t testing.TB, dbURL, query string, args ...any) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, query, args...)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

func sqlExec(t testing.TB, dbURL, stmt string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, stmt, args...)
	require.NoError(t, err)
}

// TestListQueuesPages lists 2,100 queues page by page: each exactly once,
// in name order, with next null on the last page only, whatever the limit.
func TestListQueuesPages(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)

	// Queues made in SQL (2,000 PUTs would be slow), plus three over HTTP
	// with names that mix case and punctuation, and a subscription, which
	// is a row of the same table but no queue.
	sqlExec(t, env.DatabaseURL, `
		INSERT INTO ferry.queues (name) SELECT format('q-%s', lpad(i::text, 5, '0')) FROM generate_series(1, 2097) i`)
	for _, n := range []string{"Alpha", "alpha.b", "Z_9"} {
		putQueue(t, env, n, nil)
	}
	putTopic(t, env, "t", nil, http.StatusCreated)
	putSub(t, env, "t", "q-00007-sub", nil, http.StatusCreated)
	want := sqlNames(t, env.DatabaseURL, `SELECT name FROM ferry.queues WHERE topic_id IS NULL ORDER BY name`)
	require.Len(t, want, 2100)

	for _, tt := range []struct{ limit, pages int }{
		{1000, 3}, {0, 21}, {700, 3}, {37, 57}, // 700 fills the last page exactly
	} {
		got, pages := listAll(t, env, "/v1/queues", "queues", tt.limit)
		require.Equal(t, want, got, "limit %d: every queue once, in order", tt.limit)
		require.Equal(t, tt.pages, pages, "limit %d", tt.limit)
	}

	// Each listed queue carries its own stats, also past the first page.
	send(t, env, "q-01500", msg(1), msg(2))
	_, next := listPage(t, env, "/v1/queues", "queues", 1000, "")
	r := env.Do("GET", listPath("/v1/queues", 1000, next), nil)
	var page struct {
		Queues []client.Queue `json:"queues"`
	}
	r.JSON(t, &page)
	found := false
	for _, q := range page.Queues {
		require.EqualValues(t, map[bool]int64{true: 2}[q.Name == "q-01500"], q.Stats.Available, q.Name)
		found = found || q.Name == "q-01500"
	}
	require.True(t, found, "q-01500 is on the second page")
}

// listNames are created out of order; their lengths differ, so that of two
// consecutive cursors one has bits that carry nothing (see TestListBadPages).
var listNames = []string{"ggggggg", "a", "eeeee", "ccc", "ffffff", "bb", "dddd"}

// listRoutes sets up each list route with the names it should list:
// seven of each, created out of order, and others that must not show
// (another topic's subscriptions and groups).
func listRoutes(t *testing.T, env *ferrytest.Env) []struct{ path, member string } {
	t.Helper()
	for _, n := range listNames {
		putTopic(t, env, n, map[string]any{"partitions": 1}, http.StatusCreated)
	}
	for _, n := range listNames {
		putSub(t, env, "a", n, nil, http.StatusCreated)
		gpoll(t, env, "a", n, "c1", nil)
	}
	putSub(t, env, "bb", "0", nil, http.StatusCreated)
	gpoll(t, env, "bb", "0", "c1", nil)
	return []struct{ path, member string }{
		{"/v1/topics", "topics"},
		{tpath("a", "/subscriptions"), "subscriptions"},
		{tpath("a", "/groups"), "groups"},
	}
}

// TestListRoutesPage pages through topics, a topic's subscriptions and its
// groups with every limit from 1 to past the end.
func TestListRoutesPage(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	want := []string{"a", "bb", "ccc", "dddd", "eeeee", "ffffff", "ggggggg"}
	for _, route := range listRoutes(t, env) {
		for limit := 1; limit <= 8; limit++ {
			got, pages := listAll(t, env, route.path, route.member, limit)
			require.Equal(t, want, got, "%s limit %d", route.path, limit)
			require.Equal(t, (len(want)+limit-1)/limit, pages, "%s limit %d", route.path, limit)
		}
		got, pages := listAll(t, env, route.path, route.member, 0)
		require.Equal(t, want, got, route.path)
		require.Equal(t, 1, pages, route.path)
	}
}

// TestListBadPages: a limit out of 1..1000 or not an integer, and a cursor
// Ferry did not issue for that list, are 400 on every list route.
func TestListBadPages(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	for _, n := range listNames {
		putQueue(t, env, n, nil)
	}
	routes := append(listRoutes(t, env), struct{ path, member string }{"/v1/queues", "queues"})

	for _, route := range routes {
		// The cursor after "a" or the one after "bb": whichever encodes a
		// length that is no multiple of 3, so that its last character has
		// bits that carry nothing.
		var cursor string
		var raw []byte
		for limit := 1; limit <= 2 && len(raw)%3 == 0; limit++ {
			_, cursor = listPage(t, env, route.path, route.member, limit, "")
			require.NotEmpty(t, cursor, route.path)
			var err error
			raw, err = base64.RawURLEncoding.DecodeString(cursor)
			require.NoError(t, err)
		}
		require.NotZero(t, len(raw)%3)

		var queries []string
		for _, l := range []string{"0", "1001", "-1", "x", "", "1.5", "1e2", " 5", "99999999999999999999"} {
			queries = append(queries, "limit="+url.QueryEscape(l))
		}
		queries = append(queries, "limit=1&limit=2", "after="+cursor+"&after="+cursor)
		// Cursors Ferry never issued: not base64url, padded, with a line
		// break (which a lax decoder skips), the standard alphabet, empty,
		// carrying no list's name, an invalid name, or another list's kind.
		forged := []string{
			"x!", cursor + "=", cursor[:2] + "\n" + cursor[2:], base64.StdEncoding.EncodeToString(raw), "",
			base64.RawURLEncoding.EncodeToString([]byte("alpha")),
			base64.RawURLEncoding.EncodeToString([]byte(route.member + ":-alpha")),
			base64.RawURLEncoding.EncodeToString([]byte(route.member + ":")),
			base64.RawURLEncoding.EncodeToString([]byte(route.member + ":alpha\x00")),
		}
		for _, other := range routes {
			if other.member != route.member {
				forged = append(forged, base64.RawURLEncoding.EncodeToString([]byte(other.member+":alpha")))
			}
		}
		// The last character changed in bits that carry nothing: a lax
		// decoder reads the same cursor from it, a strict one refuses it.
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		last := strings.IndexByte(alphabet, cursor[len(cursor)-1])
		malleable := cursor[:len(cursor)-1] + string(alphabet[last^1])
		lax, err := base64.RawURLEncoding.DecodeString(malleable)
		require.NoError(t, err)
		require.Equal(t, raw, lax)
		forged = append(forged, malleable)
		for _, f := range forged {
			queries = append(queries, "after="+url.QueryEscape(f))
		}
		for _, q := range queries {
			p := requireProblem(t, env.Do("GET", route.path+"?"+q, nil), http.StatusBadRequest, "invalid_request")
			require.Contains(t, p["detail"], strings.SplitN(q, "=", 2)[0], "%s?%s", route.path, q)
		}
		// The bounds themselves are fine.
		listPage(t, env, route.path, route.member, 1000, "")
		listPage(t, env, route.path, route.member, 1, cursor)
	}
}

// TestListDeletedBetweenPages: items deleted between two pages, the last
// one listed among them, are no error; the next page goes on after it.
func TestListDeletedBetweenPages(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	names := []string{"a1", "b2", "c3", "d4", "e5"}
	putTopic(t, env, "t", nil, http.StatusCreated)
	for _, n := range names {
		putQueue(t, env, n, nil)
		putTopic(t, env, "t-"+n, nil, http.StatusCreated)
		putSub(t, env, "t", n, nil, http.StatusCreated)
		gpoll(t, env, "t", n, "c1", nil)
	}
	for _, tt := range []struct {
		path, member string
		del          func(name string) string
	}{
		{"/v1/queues", "queues", func(n string) string { return qpath(n) }},
		{"/v1/topics", "topics", func(n string) string { return tpath("t-" + n) }},
		{tpath("t", "/subscriptions"), "subscriptions", func(n string) string { return spath("t", n) }},
		{tpath("t", "/groups"), "groups", func(n string) string { return gpath("t", n) }},
	} {
		first, next := listPage(t, env, tt.path, tt.member, 2, "")
		if tt.member == "topics" {
			require.Equal(t, []string{"t", "t-a1"}, first)
		} else {
			require.Equal(t, []string{"a1", "b2"}, first)
		}
		// The last listed and the first of the next page go.
		last := strings.TrimPrefix(first[1], "t-")
		for _, n := range []string{last, "c3"} {
			r := env.Do("DELETE", tt.del(n), nil)
			require.Equal(t, http.StatusNoContent, r.Status, "DELETE %s: %s", tt.del(n), r.Body)
		}
		rest, pages := []string{}, 0
		for after := next; after != ""; pages++ {
			var got []string
			got, after = listPage(t, env, tt.path, tt.member, 2, after)
			rest = append(rest, got...)
		}
		want := []string{"d4", "e5"}
		if tt.member == "topics" {
			want = []string{"t-b2", "t-d4", "t-e5"}
		}
		require.Equal(t, want, rest, tt.path)
		require.Equal(t, (len(want)+1)/2, pages, tt.path)
	}
}

// TestListEmpty: an empty list is one page, [] and next null.
func TestListEmpty(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "t", nil, http.StatusCreated)
	for _, route := range []struct{ path, body string }{
		{"/v1/queues", `{"queues": [], "next": null}`},
		{tpath("t", "/subscriptions"), `{"subscriptions": [], "next": null}`},
		{tpath("t", "/groups"), `{"groups": [], "next": null}`},
	} {
		r := env.Do("GET", listPath(route.path, 5, ""), nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		require.JSONEq(t, route.body, string(r.Body), route.path)
	}
}
