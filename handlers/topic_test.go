package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// The topic shapes are the client's (client.Topic, client.Event, ...);
// the key lists below are for the wire tests.

var (
	topicKeys     = []string{"name", "partitions", "retention_seconds", "dedup_window_seconds", "source", "created_at", "updated_at", "offsets"}
	offsetsKeys   = []string{"partition", "head_offset", "oldest_offset"}
	publishedKeys = []string{"id", "partition", "offset", "duplicate"}
	eventKeys     = []string{"id", "type", "key", "data", "attributes", "partition", "offset", "published_at",
		"source", "time", "datacontenttype", "extensions"} // the CloudEvents attributes of a plain JSON event
	eventPageKeys = []string{"events", "next_offset"}
)

func tpath(topic string, rest ...string) string {
	return "/v1/topics/" + url.PathEscape(topic) + strings.Join(rest, "")
}

// requireTopicKeys checks the members of a topic object and its offsets.
func requireTopicKeys(t testing.TB, obj map[string]any) {
	t.Helper()
	requireKeys(t, obj, topicKeys, "topic")
	requireArray(t, obj, "offsets", keysOf(offsetsKeys, "partition offsets"))
}

// putTopic PUTs the topic and requires the given status (201 or 200).
func putTopic(t testing.TB, env *ferrytest.Env, name string, cfg map[string]any, status int) client.Topic {
	t.Helper()
	tp, created, err := api(env).PutTopic(t.Context(), name, typed[client.TopicConfig](t, cfg))
	require.NoError(t, err, "put topic %s", name)
	require.Equal(t, status == http.StatusCreated, created, "put topic %s: want %d", name, status)
	return *tp
}

func getTopic(t testing.TB, env *ferrytest.Env, name string) client.Topic {
	t.Helper()
	tp, err := api(env).GetTopic(t.Context(), name)
	require.NoError(t, err, "get topic %s", name)
	return *tp
}

// listTopics is the first page of the topics.
func listTopics(t testing.TB, env *ferrytest.Env) []client.Topic {
	t.Helper()
	l, err := api(env).ListTopics(t.Context(), client.Page{})
	require.NoError(t, err, "list topics")
	require.NotNil(t, l.Topics)
	return l.Topics
}

// evt builds one event of a publish batch.
func evt(typ string, kv ...any) map[string]any {
	return withFields(map[string]any{"type": typ}, kv)
}

func publishEvents(t testing.TB, env *ferrytest.Env, topic string, events ...map[string]any) []client.Published {
	t.Helper()
	batch := pluck(events, func(e map[string]any) client.PublishEvent { return typed[client.PublishEvent](t, e) })
	out, err := api(env).Publish(t.Context(), topic, batch...)
	require.NoError(t, err, "publish to %s", topic)
	require.Len(t, out, len(events))
	for i, e := range batch {
		if e.ID != "" {
			require.Equal(t, e.ID, out[i].ID, "results in request order")
		}
	}
	return out
}

// publishRaw publishes the events as written, for the tests whose subject
// is what REST makes of a body ("data": null, "attributes": {}).
func publishRaw(t testing.TB, env *ferrytest.Env, topic string, events ...map[string]any) []client.Published {
	t.Helper()
	return call[struct {
		Events []client.Published `json:"events"`
	}](t, env, "POST", tpath(topic, "/events"), map[string]any{"events": events}, nil, http.StatusCreated).Events
}

// readEvents reads a page of events; query is "" or a query string of
// partition, from_offset or from_time, limit and wait_seconds.
func readEvents(t testing.TB, env *ferrytest.Env, topic, query string) client.EventPage {
	t.Helper()
	page, err := api(env).ReadEvents(t.Context(), topic, readOf(t, query))
	require.NoError(t, err, "read %s%s", topic, query)
	require.NotNil(t, page.Events)
	return *page
}

// readOf is the client's ReadEvents for a query string.
func readOf(t testing.TB, query string) client.ReadEvents {
	t.Helper()
	v := queryParams(t, query, "partition", "from_offset", "from_time", "limit", "wait_seconds")
	r := client.ReadEvents{
		Partition: int(intParam(t, v, "partition")), FromOffset: intParam(t, v, "from_offset"),
		Limit: int(intParam(t, v, "limit")), WaitSeconds: int(intParam(t, v, "wait_seconds")),
	}
	if s := v.Get("from_time"); s != "" {
		var err error
		r.FromTime, err = time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		require.False(t, v.Has("from_offset"), "from_offset or from_time")
	}
	return r
}

// decodePage decodes a read's answer that came raw (from doAsync),
// checking its members.
func decodePage(t testing.TB, body []byte) client.EventPage {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), "body %s", body)
	listKeys(eventPageKeys, keysOf(eventKeys, "event"))(t, m)
	var page client.EventPage
	require.NoError(t, json.Unmarshal(body, &page))
	return page
}

func pageOffsets(p client.EventPage) []int64 {
	return pluck(p.Events, func(e client.Event) int64 { return e.Offset })
}

func offsetRange(from, to int64) []int64 { return between(from, to) }

// between is from, from+1, ..., to: empty (not nil) when to < from.
func between[T int | int64](from, to T) []T {
	out := []T{}
	for v := from; v <= to; v++ {
		out = append(out, v)
	}
	return out
}

// getAsync GETs path with the admin key through env's validating client,
// without require (for goroutines).
func getAsync(env *ferrytest.Env, path string) asyncResult { return doAsync(env, "GET", path, nil) }

func TestTopicPutGetListDelete(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)

	created := putTopic(t, env, "orders", nil, http.StatusCreated)
	require.Equal(t, "orders", created.Name)
	require.Equal(t, 4, created.Partitions)
	require.Equal(t, 604800, created.RetentionSeconds)
	require.Equal(t, 300, created.DedupWindowSeconds)
	require.True(t, created.UpdatedAt.Equal(created.CreatedAt), "updated_at is the creation time at first")
	require.WithinDuration(t, time.Now(), created.CreatedAt, time.Minute)
	require.Equal(t, []client.PartitionOffsets{{Partition: 0, HeadOffset: -1, OldestOffset: 0}, {Partition: 1, HeadOffset: -1, OldestOffset: 0}, {Partition: 2, HeadOffset: -1, OldestOffset: 0}, {Partition: 3, HeadOffset: -1, OldestOffset: 0}}, created.Offsets)
	require.Equal(t, created, getTopic(t, env, "orders"))

	// A PUT changes only the fields given.
	upd := putTopic(t, env, "orders", map[string]any{"retention_seconds": 3600}, http.StatusOK)
	require.Equal(t, 4, upd.Partitions)
	require.Equal(t, 3600, upd.RetentionSeconds)
	require.Equal(t, 300, upd.DedupWindowSeconds)
	require.True(t, upd.CreatedAt.Equal(created.CreatedAt))
	require.False(t, upd.UpdatedAt.Before(created.UpdatedAt))
	upd = putTopic(t, env, "orders", map[string]any{"dedup_window_seconds": 0}, http.StatusOK)
	require.Equal(t, 3600, upd.RetentionSeconds)
	require.Equal(t, 0, upd.DedupWindowSeconds)

	// A PUT that changes nothing keeps updated_at.
	for _, body := range []map[string]any{nil, {}, {"partitions": 4}, {"partitions": 4, "retention_seconds": 3600, "dedup_window_seconds": 0}} {
		same := putTopic(t, env, "orders", body, http.StatusOK)
		require.Equal(t, upd, same, "PUT %v changed nothing", body)
	}

	// Partitions grow; new ones start empty.
	publishEvents(t, env, "orders", evt("t", "key", "a"), evt("t", "key", "a")) // "a" → partition 0 of 4
	grown := putTopic(t, env, "orders", map[string]any{"partitions": 6}, http.StatusOK)
	require.Equal(t, 6, grown.Partitions)
	require.Equal(t, []client.PartitionOffsets{{Partition: 0, HeadOffset: 1, OldestOffset: 0}, {Partition: 1, HeadOffset: -1, OldestOffset: 0}, {Partition: 2, HeadOffset: -1, OldestOffset: 0}, {Partition: 3, HeadOffset: -1, OldestOffset: 0}, {Partition: 4, HeadOffset: -1, OldestOffset: 0}, {Partition: 5, HeadOffset: -1, OldestOffset: 0}}, grown.Offsets)

	// Shrinking is a conflict that changes nothing.
	for _, n := range []int{5, 1} {
		r := env.Do("PUT", tpath("orders"), map[string]any{"partitions": n, "retention_seconds": 60})
		requireProblem(t, r, http.StatusConflict, "conflict")
	}
	require.Equal(t, grown, getTopic(t, env, "orders"))

	// The list, sorted by name.
	putTopic(t, env, "audit", map[string]any{"partitions": 1, "retention_seconds": 60, "dedup_window_seconds": 86400}, http.StatusCreated)
	list := listTopics(t, env)
	require.Len(t, list, 2)
	require.Equal(t, "audit", list[0].Name)
	require.Equal(t, client.Topic{Name: "audit", Partitions: 1, RetentionSeconds: 60, DedupWindowSeconds: 86400, Source: "/ferry/topics/audit",
		CreatedAt: list[0].CreatedAt, UpdatedAt: list[0].CreatedAt, Offsets: []client.PartitionOffsets{{Partition: 0, HeadOffset: -1, OldestOffset: 0}}}, list[0])
	require.Equal(t, grown, list[1])

	// Delete: 204 without a body, then 404 everywhere.
	r := env.Do("DELETE", tpath("orders"), nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	require.Empty(t, r.Body)
	requireProblem(t, env.Do("GET", tpath("orders"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("DELETE", tpath("orders"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("GET", tpath("orders", "/events"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("POST", tpath("orders", "/events"), map[string]any{"events": []any{evt("t")}}), http.StatusNotFound, "not_found")
	list = listTopics(t, env)
	require.Len(t, list, 1)
	require.Equal(t, "audit", list[0].Name)

	// The name again: a new, empty topic.
	again := putTopic(t, env, "orders", map[string]any{"partitions": 2}, http.StatusCreated)
	require.Equal(t, 604800, again.RetentionSeconds, "a new topic takes the defaults")
	require.Equal(t, []client.PartitionOffsets{{Partition: 0, HeadOffset: -1, OldestOffset: 0}, {Partition: 1, HeadOffset: -1, OldestOffset: 0}}, again.Offsets)
	res := publishEvents(t, env, "orders", evt("t", "key", "a"))
	require.EqualValues(t, 0, res[0].Offset)

	// The deleted topic's rows are cleaned up by the job it scheduled.
	eventuallyNone(t, env, `
			SELECT (SELECT count(*) FROM ferry.events e WHERE NOT EXISTS (SELECT FROM ferry.topics t WHERE t.id = e.topic_id))
			     + (SELECT count(*) FROM ferry.event_dedup d WHERE NOT EXISTS (SELECT FROM ferry.topics t WHERE t.id = d.topic_id))
			     + (SELECT count(*) FROM ferry.topic_partitions p WHERE NOT EXISTS (SELECT FROM ferry.topics t WHERE t.id = p.topic_id))`, "the deleted topic's events, ids and partitions are removed")
}

func TestTopicNames(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	for _, name := range []string{"a", "A9", "orders.eu-west_1", "9lives", strings.Repeat("x", 128)} {
		require.Equal(t, name, putTopic(t, env, name, nil, http.StatusCreated).Name)
		require.Equal(t, name, getTopic(t, env, name).Name)
		publishEvents(t, env, name, evt("t"))
	}
}

// withAppName returns the database URL with an application_name, so that
// pg_stat_activity tells a server's sessions apart.
func withAppName(t testing.TB, dbURL, name string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// pollingServers starts a server per application name on one new
// database, each polling only every 30 s (so only a wake-up explains a
// prompt answer), and returns the database's URL and the servers.
func pollingServers(t testing.TB, apps ...string) (string, []*ferrytest.Env) {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	envs := make([]*ferrytest.Env, len(apps))
	for i, app := range apps {
		envs[i] = ferrytest.StartOn(t, withAppName(t, dbURL, app), withPoll(30*time.Second))
	}
	return dbURL, envs
}

// keyFor returns a key that fnv1a32 maps to partition p of n.
func keyFor(t testing.TB, p, n int) string {
	t.Helper()
	for i := range 1000 {
		k := fmt.Sprintf("k%d", i)
		h := uint32(2166136261)
		for _, c := range []byte(k) {
			h ^= uint32(c)
			h *= 16777619
		}
		if int(h%uint32(n)) == p {
			return k
		}
	}
	t.Fatalf("no key for partition %d of %d", p, n)
	return ""
}

// topicState is everything a refused topic request could change.
type topicState struct {
	Topics []client.Topic
	Rows   map[string]int
}

func topicSnapshot(t testing.TB, env *ferrytest.Env) topicState {
	t.Helper()
	s := topicState{Topics: listTopics(t, env), Rows: map[string]int{}}
	for table, query := range map[string]string{
		"events":          `SELECT count(*) FROM ferry.events`,
		"event ids":       `SELECT count(*) FROM ferry.event_dedup`,
		"partitions":      `SELECT count(*) FROM ferry.topic_partitions`,
		"cleanup jobs":    `SELECT count(*) FROM river_job WHERE kind = 'ferry_topic_cleanup'`,
		"newest event at": `SELECT coalesce(extract(epoch FROM max(published_at)) * 1e6, 0)::bigint FROM ferry.events`,
	} {
		var n int
		require.NoError(t, env.Server.Pool().QueryRow(context.Background(), query).Scan(&n))
		s.Rows[table] = n
	}
	return s
}

// runTopicBadCases sends each case and checks the problem and that nothing
// was written; a case without headers is sent with the admin key, one
// with headers exactly so.
func runTopicBadCases(t *testing.T, env *ferrytest.Env, cases []badCase) {
	t.Helper()
	runBadCasesOn(t, env, cases, func(t testing.TB, env *ferrytest.Env) any { return topicSnapshot(t, env) }, func(header http.Header) http.Header {
		if header == nil {
			header = http.Header{"Authorization": {"Bearer " + ferrytest.AdminKey}}
		}
		return header
	})
}

func TestTopicBadRequests(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "bad", map[string]any{"partitions": 2, "dedup_window_seconds": 60}, http.StatusCreated)
	publishEvents(t, env, "bad", evt("t", "id", "existing"), evt("t"))

	const (
		bad      = http.StatusBadRequest
		tooLarge = http.StatusRequestEntityTooLarge
		inv      = "invalid_request"
		big      = "payload_too_large"
	)
	events := tpath("bad", "/events")
	ok := evt("t", "id", "should-not-be-written")
	batch := func(evs ...any) map[string]any { return map[string]any{"events": evs} }
	thousandOne := make([]any, 1001)
	for i := range thousandOne {
		thousandOne[i] = evt("t")
	}
	cases := []badCase{
		// Publish.
		{"no body", "POST", events, nil, nil, bad, inv},
		{"empty object", "POST", events, `{}`, nil, bad, inv},
		{"null body", "POST", events, `null`, nil, bad, inv},
		{"events null", "POST", events, `{"events":null}`, nil, bad, inv},
		{"events empty", "POST", events, `{"events":[]}`, nil, bad, inv},
		{"events not an array", "POST", events, `{"events":{"type":"t"}}`, nil, bad, inv},
		{"event not an object", "POST", events, `{"events":["t"]}`, nil, bad, inv},
		{"malformed JSON", "POST", events, `{"events":[{"type":"t"}`, nil, bad, inv},
		{"trailing data", "POST", events, `{"events":[{"type":"t"}]} {}`, nil, bad, inv},
		{"event without type", "POST", events, batch(ok, map[string]any{"id": "x"}), nil, bad, inv},
		{"type null", "POST", events, batch(ok, map[string]any{"type": nil}), nil, bad, inv},
		{"type empty", "POST", events, batch(ok, evt("")), nil, bad, inv},
		{"type 257 bytes", "POST", events, batch(ok, evt(strings.Repeat("t", 257))), nil, bad, inv},
		{"type 129 two-byte runes", "POST", events, batch(ok, evt(strings.Repeat("é", 129))), nil, bad, inv},
		{"type with NUL", "POST", events, batch(ok, evt("a\u0000b")), nil, bad, inv},
		{"type a number", "POST", events, batch(ok, map[string]any{"type": 1}), nil, bad, inv},
		{"id empty", "POST", events, batch(ok, evt("t", "id", "")), nil, bad, inv},
		{"id 257 bytes", "POST", events, batch(ok, evt("t", "id", strings.Repeat("i", 257))), nil, bad, inv},
		{"key empty", "POST", events, batch(ok, evt("t", "key", "")), nil, bad, inv},
		{"key 257 bytes", "POST", events, batch(ok, evt("t", "key", strings.Repeat("k", 257))), nil, bad, inv},
		{"key a number", "POST", events, batch(ok, evt("t", "key", 7)), nil, bad, inv},
		{"unknown field in event", "POST", events, batch(ok, evt("t", "body", 1)), nil, bad, inv},
		{"unknown top-level field", "POST", events, map[string]any{"events": []any{ok}, "topic": "bad"}, nil, bad, inv},
		{"attributes not strings", "POST", events, batch(ok, evt("t", "attributes", map[string]any{"n": 1})), nil, bad, inv},
		{"attributes an array", "POST", events, batch(ok, evt("t", "attributes", []any{"a"})), nil, bad, inv},
		{"attribute key empty", "POST", events, batch(ok, evt("t", "attributes", map[string]any{"": "v"})), nil, bad, inv},
		{"data with NUL", "POST", events, `{"events":[{"type":"t","id":"nul"},{"type":"t","data":{"s":"a\u0000b"}}]}`, nil, bad, inv},
		{"data with nested NUL", "POST", events, `{"events":[{"type":"t","data":[1,{"k":["\u0000"]}]}]}`, nil, bad, inv},
		{"data key with NUL", "POST", events, `{"events":[{"type":"t","data":{"a\u0000":1}}]}`, nil, bad, inv},
		{"1001 events", "POST", events, batch(thousandOne...), nil, tooLarge, big},
		{"data over the limit", "POST", events, batch(ok, evt("t", "data", strings.Repeat("x", 256<<10))), nil, tooLarge, big},
		{"duplicate of existing and a bad one", "POST", events, batch(evt("t", "id", "existing"), evt("")), nil, bad, inv},

		// PUT.
		{"partitions 0", "PUT", tpath("new"), map[string]any{"partitions": 0}, nil, bad, inv},
		{"partitions 257", "PUT", tpath("new"), map[string]any{"partitions": 257}, nil, bad, inv},
		{"partitions -1", "PUT", tpath("new"), map[string]any{"partitions": -1}, nil, bad, inv},
		{"partitions x", "PUT", tpath("new"), `{"partitions":"x"}`, nil, bad, inv},
		{"partitions 1.5", "PUT", tpath("new"), `{"partitions":1.5}`, nil, bad, inv},
		{"partitions null object", "PUT", tpath("new"), `{"partitions":{}}`, nil, bad, inv},
		{"retention 59", "PUT", tpath("new"), map[string]any{"retention_seconds": 59}, nil, bad, inv},
		{"retention over a year", "PUT", tpath("new"), map[string]any{"retention_seconds": 31536001}, nil, bad, inv},
		{"dedup -1", "PUT", tpath("new"), map[string]any{"dedup_window_seconds": -1}, nil, bad, inv},
		{"dedup over a day", "PUT", tpath("new"), map[string]any{"dedup_window_seconds": 86401}, nil, bad, inv},
		{"unknown config field", "PUT", tpath("new"), map[string]any{"partitons": 2}, nil, bad, inv},
		{"config not an object", "PUT", tpath("new"), `[]`, nil, bad, inv},
		{"bad update of existing", "PUT", tpath("bad"), map[string]any{"partitions": 4, "retention_seconds": 59}, nil, bad, inv},
		{"shrink", "PUT", tpath("bad"), map[string]any{"partitions": 1}, nil, http.StatusConflict, "conflict"},
		{"shrink with other changes", "PUT", tpath("bad"), map[string]any{"partitions": 1, "retention_seconds": 60}, nil, http.StatusConflict, "conflict"},

		// Read.
		{"partition = partitions", "GET", events + "?partition=2", nil, nil, bad, inv},
		{"partition 256", "GET", events + "?partition=256", nil, nil, bad, inv},
		{"partition -1", "GET", events + "?partition=-1", nil, nil, bad, inv},
		{"partition x", "GET", events + "?partition=x", nil, nil, bad, inv},
		{"from_offset -1", "GET", events + "?from_offset=-1", nil, nil, bad, inv},
		{"from_offset x", "GET", events + "?from_offset=x", nil, nil, bad, inv},
		{"from_offset 1.0", "GET", events + "?from_offset=1.0", nil, nil, bad, inv},
		{"from_time garbage", "GET", events + "?from_time=yesterday", nil, nil, bad, inv},
		{"from_time a date only", "GET", events + "?from_time=2024-01-01", nil, nil, bad, inv},
		{"from_time without zone", "GET", events + "?from_time=2024-01-01T00:00:00", nil, nil, bad, inv},
		{"from_time with from_offset", "GET", events + "?from_offset=0&from_time=2024-01-01T00:00:00Z", nil, nil, bad, inv},
		{"limit 0", "GET", events + "?limit=0", nil, nil, bad, inv},
		{"limit 1001", "GET", events + "?limit=1001", nil, nil, bad, inv},
		{"limit -1", "GET", events + "?limit=-1", nil, nil, bad, inv},
		{"wait_seconds 21", "GET", events + "?wait_seconds=21", nil, nil, bad, inv},
		{"wait_seconds -1", "GET", events + "?wait_seconds=-1", nil, nil, bad, inv},
		{"wait_seconds 1.5", "GET", events + "?wait_seconds=1.5", nil, nil, bad, inv},
		{"unknown query parameter", "GET", events + "?offset=0", nil, nil, bad, inv},
		{"unknown query parameter too", "GET", events + "?partition=0&max_events=5", nil, nil, bad, inv},

		// Unknown topic.
		{"get unknown", "GET", tpath("ghost"), nil, nil, http.StatusNotFound, "not_found"},
		{"delete unknown", "DELETE", tpath("ghost"), nil, nil, http.StatusNotFound, "not_found"},
		{"publish unknown", "POST", tpath("ghost", "/events"), batch(evt("t")), nil, http.StatusNotFound, "not_found"},
		{"read unknown", "GET", tpath("ghost", "/events"), nil, nil, http.StatusNotFound, "not_found"},
		{"long-poll unknown", "GET", tpath("ghost", "/events") + "?wait_seconds=5", nil, nil, http.StatusNotFound, "not_found"},
	}
	runTopicBadCases(t, env, cases)

	// Nothing of it was written; the topic still works.
	tp := getTopic(t, env, "bad")
	require.Equal(t, 2, tp.Partitions)
	require.Equal(t, 604800, tp.RetentionSeconds)
	require.Equal(t, 60, tp.DedupWindowSeconds)
	res := publishEvents(t, env, "bad", evt("t", "id", "should-not-be-written"), evt("t", "id", "nul"))
	require.False(t, res[0].Duplicate, "the refused batches' ids were not remembered")
	require.False(t, res[1].Duplicate)
}

func TestBadTopicNames(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "ok", nil, http.StatusCreated)
	cases := badNameCases(tpath, "t✓",
		nameRoute{"publish", "POST", "/events", `{"events":[{"type":"t"}]}`},
		nameRoute{"read", "GET", "/events", nil})
	runTopicBadCases(t, env, cases)
	require.Len(t, listTopics(t, env), 1)
}

func TestTopicAuth(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "secured", map[string]any{"partitions": 1}, http.StatusCreated)
	publishEvents(t, env, "secured", evt("t"))
	headers := map[string]http.Header{
		"missing":   {},
		"wrong key": {"Authorization": {"Bearer wrong-key-0123456789abcdef"}},
		"no scheme": {"Authorization": {ferrytest.AdminKey}},
	}
	routes := []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/topics", nil},
		{"PUT", tpath("intruder"), `{}`},
		{"PUT", tpath("secured"), `{"partitions":2}`},
		{"GET", tpath("secured"), nil},
		{"DELETE", tpath("secured"), nil},
		{"POST", tpath("secured", "/events"), `{"events":[{"type":"t"}]}`},
		{"GET", tpath("secured", "/events"), nil},
		{"GET", tpath("secured", "/events") + "?wait_seconds=5", nil},
		{"GET", tpath("ghost"), nil},
	}
	var cases []badCase
	for hname, h := range headers {
		for _, rt := range routes {
			cases = append(cases, badCase{hname + " " + rt.method + " " + rt.path, rt.method, rt.path, rt.body, h, http.StatusUnauthorized, "unauthorized"})
		}
	}
	runTopicBadCases(t, env, cases)
	require.Len(t, listTopics(t, env), 1)
	require.EqualValues(t, 0, getTopic(t, env, "secured").Offsets[0].HeadOffset)
}

// TestTopicDeleteDuringPublish: a DELETE that meets a publish in progress
// answers 204 (the publish lands before it or gets 404), never a 500. The
// interleaving is forced as in the store's TestTopicDeleteMeetsWaitingPublish:
// the publish holds partition 0 and waits for partition 1 (held by the
// test); the DELETE takes partition 2 first (the partition rows' physical
// order, after publishes to 0 and 1 and an ANALYZE as autovacuum makes,
// is 2, 0, 1) and waits for 0.
func TestTopicDeleteDuringPublish(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	env := ferrytest.StartOn(t, withAppName(t, dbURL, "ferry-a"))
	putTopic(t, env, "crossed", map[string]any{"partitions": 3}, http.StatusCreated)
	publishEvents(t, env, "crossed", evt("t", "key", keyFor(t, 0, 3)))
	publishEvents(t, env, "crossed", evt("t", "key", keyFor(t, 1, 3)))
	ctx := context.Background()
	conn := dbConn(t, dbURL)
	_, err := conn.Exec(ctx, `ANALYZE ferry.topic_partitions`)
	require.NoError(t, err)

	waiting := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			var got int
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = 'ferry-a' AND wait_event_type = 'Lock'`).Scan(&got)
			return err == nil && got >= n
		}, 10*time.Second, time.Millisecond, "waiting for %d sessions of the server to wait for a lock", n)
	}

	holder, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT 1 FROM ferry.topic_partitions p JOIN ferry.topics t ON t.id = p.topic_id
		WHERE t.name = 'crossed' AND p.partition = 1 FOR UPDATE OF p`)
	require.NoError(t, err)

	batch := map[string]any{"events": []any{
		evt("t", "id", "x0", "key", keyFor(t, 0, 3)), evt("t", "id", "x1", "key", keyFor(t, 1, 3)), evt("t", "id", "x2", "key", keyFor(t, 2, 3)),
	}}
	published := make(chan asyncResult, 1)
	go func() { published <- doAsync(env, "POST", tpath("crossed", "/events"), batch) }()
	waiting(1)
	deleted := make(chan asyncResult, 1)
	go func() { deleted <- doAsync(env, "DELETE", tpath("crossed"), nil) }()
	waiting(2)
	require.NoError(t, holder.Rollback(ctx))

	pub, del := <-published, <-deleted
	require.NoError(t, pub.err)
	requireStatus(t, del, http.StatusNoContent)
	require.Contains(t, []int{http.StatusCreated, http.StatusNotFound}, pub.status, "publish: %s", pub.body)
	requireProblem(t, env.Do("GET", tpath("crossed"), nil), http.StatusNotFound, "not_found")
}

// TestTopicChangedThroughOtherInstance: server A has just used the topic
// (and may remember it); server B deletes it, and A's next publish is a
// 404; B creates it again, and A's next publish lands in the new topic.
// Nothing lands in the deleted one.
func TestTopicChangedThroughOtherInstance(t *testing.T) {
	t.Parallel()
	a := ferrytest.Start(t)
	b := ferrytest.StartOn(t, a.DatabaseURL)
	putTopic(t, a, "shifty", map[string]any{"partitions": 2}, http.StatusCreated)
	publishEvents(t, a, "shifty", evt("t", "id", "first", "key", keyFor(t, 1, 2)))

	r := b.Do("DELETE", tpath("shifty"), nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	r = a.Do("POST", tpath("shifty", "/events"), map[string]any{"events": []any{evt("t", "id", "lost")}})
	requireProblem(t, r, http.StatusNotFound, "not_found")

	putTopic(t, b, "shifty", map[string]any{"partitions": 1}, http.StatusCreated)
	res := publishEvents(t, a, "shifty", evt("t", "id", "first", "key", keyFor(t, 1, 2)))
	require.Equal(t, client.Published{ID: "first", Partition: 0, Offset: 0}, res[0], "a new topic: one partition, offsets from 0, old ids forgotten")
	page := readEvents(t, b, "shifty", "")
	require.Len(t, page.Events, 1)
	require.Equal(t, "first", page.Events[0].ID)
	require.Equal(t, []client.PartitionOffsets{{Partition: 0, HeadOffset: 0, OldestOffset: 0}}, getTopic(t, b, "shifty").Offsets)

	// Grown through B: A publishes to the new partitions soon.
	putTopic(t, b, "shifty", map[string]any{"partitions": 4}, http.StatusOK)
	k3 := keyFor(t, 3, 4)
	require.Eventually(t, func() bool {
		res := doAsync(a, "POST", tpath("shifty", "/events"), map[string]any{"events": []any{evt("t", "key", k3)}})
		var out struct {
			Events []client.Published `json:"events"`
		}
		return res.err == nil && res.status == http.StatusCreated && json.Unmarshal(res.body, &out) == nil &&
			len(out.Events) == 1 && out.Events[0].Partition == 3
	}, 10*time.Second, 50*time.Millisecond, "A keeps using the old partition count")
}
