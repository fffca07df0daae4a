package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/openapi"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// The subscription shapes are the client's (client.Subscription,
// client.Delivery, ...); the key lists below are for the wire tests.

var (
	subscriptionKeys  = []string{"name", "topic", "filter", "ordered", "visibility_timeout_seconds", "max_receives", "retention_seconds", "retry_min_seconds", "retry_max_seconds", "dead_letter_queue", "push", "created_at", "updated_at", "stats"}
	subMessageKeys    = []string{"id", "event", "receipt", "receive_count"}
	subDeadLetterKeys = []string{"id", "event", "receive_count", "last_error", "dead_lettered_at"}
)

func spath(topic, sub string, rest ...string) string {
	return tpath(topic, "/subscriptions/"+url.PathEscape(sub)) + strings.Join(rest, "")
}

// requireSubscriptionKeys checks the members of a subscription object.
func requireSubscriptionKeys(t testing.TB, obj map[string]any) {
	t.Helper()
	requireKeys(t, obj, subscriptionKeys, "subscription")
	requireKeys(t, obj["stats"].(map[string]any), statsKeys, "subscription stats")
}

// putSub PUTs the subscription and requires the given status (201 or 200).
func putSub(t testing.TB, env *ferrytest.Env, topic, sub string, cfg map[string]any, status int) client.Subscription {
	t.Helper()
	s, created, err := api(env).PutSubscription(t.Context(), topic, sub, typed[client.SubscriptionConfig](t, cfg))
	require.NoError(t, err, "put subscription %s/%s", topic, sub)
	require.Equal(t, status == http.StatusCreated, created, "put subscription %s/%s: want %d", topic, sub, status)
	return *s
}

func getSub(t testing.TB, env *ferrytest.Env, topic, sub string) client.Subscription {
	t.Helper()
	s, err := api(env).GetSubscription(t.Context(), topic, sub)
	require.NoError(t, err, "get subscription %s/%s", topic, sub)
	return *s
}

// listSubs is the first page of the topic's subscriptions.
func listSubs(t testing.TB, env *ferrytest.Env, topic string) []client.Subscription {
	t.Helper()
	l, err := api(env).ListSubscriptions(t.Context(), topic, client.Page{})
	require.NoError(t, err, "list subscriptions of %s", topic)
	require.NotNil(t, l.Subscriptions)
	return l.Subscriptions
}

// subCounts is a subscription's stats without oldest_age_seconds, which
// moves by itself.
func subCounts(t testing.TB, env *ferrytest.Env, topic, sub string) client.QueueStats {
	t.Helper()
	s := getSub(t, env, topic, sub).Stats
	s.OldestAgeSeconds = 0
	return s
}

// requireSubMessageKeys checks the members of a subscription message (or,
// with what, of a dead letter) and of its event.
func requireSubMessageKeys(keys []string, what string) func(testing.TB, map[string]any) {
	return func(t testing.TB, obj map[string]any) {
		t.Helper()
		requireKeys(t, obj, keys, what)
		requireKeys(t, obj["event"].(map[string]any), eventKeys, what+" event")
	}
}

// decodeSubMessages decodes a subscription's receive answer that came
// raw (from doAsync), checking the members of every message and event.
func decodeSubMessages(t testing.TB, body []byte) []client.Delivery {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), "body %s", body)
	listKeys([]string{"messages"}, requireSubMessageKeys(subMessageKeys, "subscription message"))(t, m)
	var out struct {
		Messages []client.Delivery `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(body, &out))
	requireDeliveries(t, out.Messages)
	return out.Messages
}

// requireDeliveries checks what every delivery says of itself.
func requireDeliveries(t testing.TB, ds []client.Delivery) {
	t.Helper()
	for _, d := range ds {
		require.Equal(t, d.Event.ID, d.ID, "a delivery's id is its event's id")
		require.NotEmpty(t, d.Receipt)
		require.GreaterOrEqual(t, d.ReceiveCount, 1)
	}
}

func receiveSub(t testing.TB, env *ferrytest.Env, topic, sub string, req map[string]any) []client.Delivery {
	t.Helper()
	out, err := api(env).ReceiveEvents(t.Context(), topic, sub, typed[client.Receive](t, req))
	require.NoError(t, err, "receive %s/%s", topic, sub)
	require.NotNil(t, out, "messages must be [], never null")
	requireDeliveries(t, out)
	return out
}

// receiveAll receives up to 100 deliveries (hidden for a minute).
func receiveAll(t testing.TB, env *ferrytest.Env, topic, sub string) []client.Delivery {
	t.Helper()
	return receiveSub(t, env, topic, sub, map[string]any{"max_messages": 100, "visibility_timeout_seconds": 60})
}

// settleSub posts receipts to a subscription's ack, nack or extend and
// returns the statuses, checking they come in request order.
func settleSub(t testing.TB, env *ferrytest.Env, topic, sub, action string, req map[string]any) []string {
	t.Helper()
	return settleWith(t, subSettler(api(env), topic, sub), action, req)
}

func subSettler(c *client.Client, topic, sub string) settler {
	return settler{
		ack: func(ctx context.Context, rs ...string) ([]client.ReceiptResult, error) {
			return c.AckEvents(ctx, topic, sub, rs...)
		},
		nack: func(ctx context.Context, n client.Nack, rs ...string) ([]client.ReceiptResult, error) {
			return c.NackEvents(ctx, topic, sub, n, rs...)
		},
		extend: func(ctx context.Context, d time.Duration, rs ...string) ([]client.ReceiptResult, error) {
			return c.ExtendEvents(ctx, topic, sub, d, rs...)
		},
	}
}

func ackSub(t testing.TB, env *ferrytest.Env, topic, sub string, rs ...string) []string {
	t.Helper()
	return settleSub(t, env, topic, sub, "ack", map[string]any{"receipts": rs})
}

func subReceipts(ms []client.Delivery) []string {
	return pluck(ms, func(m client.Delivery) string { return m.Receipt })
}

func subIDs(ms []client.Delivery) []string {
	return pluck(ms, func(m client.Delivery) string { return m.ID })
}

// subDeadLetters is one page of the subscription's dead letters; query as
// deadLetters'.
func subDeadLetters(t testing.TB, env *ferrytest.Env, topic, sub, query string) client.EventDeadLetterPage {
	t.Helper()
	page, err := api(env).ListSubscriptionDeadLetters(t.Context(), topic, sub, pageOf(t, query))
	require.NoError(t, err, "dead letters of %s/%s", topic, sub)
	require.NotNil(t, page.Messages)
	for _, d := range page.Messages {
		require.Equal(t, d.Event.ID, d.ID, "a dead letter's id is its event's id")
	}
	return *page
}

func redriveSub(t testing.TB, env *ferrytest.Env, topic, sub string, req map[string]any) int {
	t.Helper()
	n, err := api(env).RedriveSubscriptionDeadLetters(t.Context(), topic, sub, typed[client.Redrive](t, req))
	require.NoError(t, err, "redrive %s/%s", topic, sub)
	return int(n)
}

func seekSub(t testing.TB, env *ferrytest.Env, topic, sub, to string) {
	t.Helper()
	require.NoError(t, api(env).SeekSubscription(t.Context(), topic, sub, to), "seek %s/%s to %s", topic, sub, to)
}

// logEvents reads every retained event of the topic, by id.
func logEvents(t testing.TB, env *ferrytest.Env, topic string) map[string]client.Event {
	t.Helper()
	out := map[string]client.Event{}
	for p := range getTopic(t, env, topic).Partitions {
		page := readEvents(t, env, topic, fmt.Sprintf("?partition=%d&limit=1000", p))
		for _, e := range page.Events {
			out[e.ID] = e
		}
	}
	return out
}

// requireSameEvent checks that a delivered event is the log's: every
// field, data as JSON, published_at as an instant.
func requireSameEvent(t testing.TB, want, got client.Event, what string) {
	t.Helper()
	require.Equal(t, want.ID, got.ID, what)
	require.Equal(t, want.Type, got.Type, "%s: type", what)
	require.Equal(t, want.Key, got.Key, "%s: key", what)
	require.JSONEq(t, string(want.Data), string(got.Data), "%s: data", what)
	require.Equal(t, want.Attributes, got.Attributes, "%s: attributes", what)
	require.Equal(t, want.Partition, got.Partition, "%s: partition", what)
	require.Equal(t, want.Offset, got.Offset, "%s: offset", what)
	require.True(t, want.PublishedAt.Equal(got.PublishedAt), "%s: published_at %v in the log, %v delivered", what, want.PublishedAt, got.PublishedAt)
}

// jsonOf is v encoded.
func jsonOf(t testing.TB, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return string(raw)
}

func sortedCopy(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

func TestSubscriptionPutGetListDelete(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "orders", map[string]any{"partitions": 2}, http.StatusCreated)

	// Created with the defaults: a queue's, with a topic's retention.
	created := putSub(t, env, "orders", "billing", nil, http.StatusCreated)
	require.Equal(t, "billing", created.Name)
	require.Equal(t, "orders", created.Topic)
	require.Nil(t, created.Filter, "no filter: null")
	require.False(t, created.Ordered)
	require.Equal(t, 30, created.VisibilityTimeoutSeconds)
	require.Equal(t, 5, created.MaxReceives)
	require.Equal(t, 604800, created.RetentionSeconds)
	require.Equal(t, 1, created.RetryMinSeconds)
	require.Equal(t, 300, created.RetryMaxSeconds)
	require.Equal(t, client.QueueStats{}, created.Stats)
	require.True(t, created.UpdatedAt.Equal(created.CreatedAt), "updated_at is the creation time at first")
	require.WithinDuration(t, time.Now(), created.CreatedAt, time.Minute)
	require.Equal(t, created, getSub(t, env, "orders", "billing"))

	// A PUT changes only the fields given.
	upd := putSub(t, env, "orders", "billing", map[string]any{"max_receives": 7}, http.StatusOK)
	want := created
	want.MaxReceives = 7
	want.UpdatedAt = upd.UpdatedAt
	require.Equal(t, want, upd)
	require.False(t, upd.UpdatedAt.Before(created.UpdatedAt))
	require.Equal(t, upd, getSub(t, env, "orders", "billing"))

	// A PUT that changes nothing keeps updated_at; start is ignored on an
	// existing subscription.
	for _, body := range []map[string]any{nil, {}, {"max_receives": 7}, {"start": "earliest"}, {"filter": nil, "ordered": false}} {
		same := call[client.Subscription](t, env, "PUT", spath("orders", "billing"), orNil(body), requireSubscriptionKeys, http.StatusOK)
		require.Equal(t, upd, same, "PUT %v changed nothing", body)
	}

	// Every setting at once, then the filter removed again with null.
	full := putSub(t, env, "orders", "billing", map[string]any{
		"filter":  map[string]any{"types": []string{"order.*"}, "attributes": map[string]any{"region": []string{"eu", "us"}}, "data": map[string]any{"customer.tier": []any{"gold", 1.5, true, nil}}},
		"ordered": true, "visibility_timeout_seconds": 60, "max_receives": 10, "retention_seconds": 3600,
		"retry_min_seconds": 2, "retry_max_seconds": 20,
	}, http.StatusOK)
	require.JSONEq(t, `{"types":["order.*"],"attributes":{"region":["eu","us"]},"data":{"customer.tier":["gold",1.5,true,null]}}`, jsonOf(t, full.Filter))
	require.True(t, full.Ordered)
	require.Equal(t, []int{60, 10, 3600, 2, 20}, []int{full.VisibilityTimeoutSeconds, full.MaxReceives, full.RetentionSeconds, full.RetryMinSeconds, full.RetryMaxSeconds})
	require.Equal(t, full, getSub(t, env, "orders", "billing"))
	cleared := call[client.Subscription](t, env, "PUT", spath("orders", "billing"), map[string]any{"filter": nil}, requireSubscriptionKeys, http.StatusOK)
	require.Nil(t, cleared.Filter, "filter: null removes the filter")
	require.True(t, cleared.Ordered, "the other fields keep their values")
	require.Equal(t, 3600, cleared.RetentionSeconds)
	empty := putSub(t, env, "orders", "billing", map[string]any{"filter": map[string]any{"types": []string{"x"}}}, http.StatusOK)
	require.JSONEq(t, `{"types":["x"]}`, jsonOf(t, empty.Filter))
	empty = putSub(t, env, "orders", "billing", map[string]any{"filter": map[string]any{}}, http.StatusOK)
	require.Nil(t, empty.Filter, "an empty filter is no filter")

	// The list, sorted by name; another topic's subscriptions are apart.
	putSub(t, env, "orders", "zeta", nil, http.StatusCreated)
	putSub(t, env, "orders", "alpha", map[string]any{"start": "earliest"}, http.StatusCreated)
	putTopic(t, env, "other", nil, http.StatusCreated)
	require.Empty(t, listSubs(t, env, "other"))
	putSub(t, env, "other", "billing", nil, http.StatusCreated)
	list := listSubs(t, env, "orders")
	require.Equal(t, []string{"alpha", "billing", "zeta"}, []string{list[0].Name, list[1].Name, list[2].Name})
	require.Len(t, list, 3)
	require.Equal(t, getSub(t, env, "orders", "billing"), list[1])
	require.Len(t, listSubs(t, env, "other"), 1)

	// Delete: 204 without a body, then 404 everywhere.
	r := env.Do("DELETE", spath("orders", "billing"), nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	require.Empty(t, r.Body)
	requireProblem(t, env.Do("GET", spath("orders", "billing"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("DELETE", spath("orders", "billing"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("POST", spath("orders", "billing", "/receive"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("POST", spath("orders", "billing", "/seek"), map[string]any{"to": "earliest"}), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("GET", spath("orders", "billing", "/dead-letters"), nil), http.StatusNotFound, "not_found")
	require.Len(t, listSubs(t, env, "orders"), 2)
	require.Equal(t, "billing", getSub(t, env, "other", "billing").Name, "the other topic's subscription of that name stays")
	// The name again: a new subscription with the defaults.
	again := putSub(t, env, "orders", "billing", nil, http.StatusCreated)
	require.Equal(t, 5, again.MaxReceives)
	require.Nil(t, again.Filter)

	// A missing topic or subscription is a 404; nothing is created.
	requireProblem(t, env.Do("PUT", spath("ghost", "s"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("PUT", spath("ghost", "s"), map[string]any{"start": "earliest"}), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("GET", tpath("ghost", "/subscriptions"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("GET", spath("orders", "ghost"), nil), http.StatusNotFound, "not_found")
	for _, action := range []string{"/ack", "/nack", "/extend"} {
		body := map[string]any{"receipts": []string{"r"}, "visibility_timeout_seconds": 1}
		if action != "/extend" {
			delete(body, "visibility_timeout_seconds")
		}
		// A receipt Ferry never issued is a 400 before the lookup (with a
		// real one, a missing subscription is a 404: see
		// TestSubscriptionsOfDeletedTopic).
		requireProblem(t, env.Do("POST", spath("orders", "ghost", action), body), http.StatusBadRequest, "invalid_request")
	}
	r = env.Do("DELETE", spath("orders", "ghost", "/dead-letters"), nil)
	requireProblem(t, r, http.StatusNotFound, "not_found")
	r = env.Do("POST", spath("orders", "ghost", "/dead-letters/redrive"), map[string]any{"limit": 1})
	requireProblem(t, r, http.StatusNotFound, "not_found")
	// A PUT of a subscription does not create its topic.
	requireProblem(t, env.Do("GET", tpath("ghost"), nil), http.StatusNotFound, "not_found")
}

func TestSubscriptionBadRequests(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "t", map[string]any{"partitions": 1}, http.StatusCreated)
	putSub(t, env, "t", "ok", map[string]any{"filter": map[string]any{"types": []string{"a"}}}, http.StatusCreated)
	before := getSub(t, env, "t", "ok")

	const bad, inv = http.StatusBadRequest, "invalid_request"
	bodies := []struct {
		name string
		body any
	}{
		{"unknown field", map[string]any{"push_url": "x"}},
		{"unknown field name", map[string]any{"filters": map[string]any{}}},
		{"not an object", `[]`},
		{"malformed", `{"ordered":`},
		{"filter unknown member", map[string]any{"filter": map[string]any{"type": []string{"a"}}}},
		{"filter not an object", map[string]any{"filter": []string{"a"}}},
		{"filter a string", map[string]any{"filter": "order.*"}},
		{"type pattern order*", map[string]any{"filter": map[string]any{"types": []string{"order*"}}}},
		{"type pattern *order", map[string]any{"filter": map[string]any{"types": []string{"a.*order"}}}},
		{"type pattern #x", map[string]any{"filter": map[string]any{"types": []string{"#x.y"}}}},
		{"types empty", map[string]any{"filter": map[string]any{"types": []string{}}}},
		{"type empty", map[string]any{"filter": map[string]any{"types": []string{""}}}},
		{"type 257 bytes", map[string]any{"filter": map[string]any{"types": []string{strings.Repeat("t", 257)}}}},
		{"101 types", map[string]any{"filter": map[string]any{"types": repeat("t", 101)}}},
		{"types not strings", map[string]any{"filter": map[string]any{"types": []any{1}}}},
		{"attribute values empty", map[string]any{"filter": map[string]any{"attributes": map[string]any{"region": []string{}}}}},
		{"attribute values not a list", map[string]any{"filter": map[string]any{"attributes": map[string]any{"region": "eu"}}}},
		{"attribute values not strings", map[string]any{"filter": map[string]any{"attributes": map[string]any{"n": []any{1}}}}},
		{"attribute key empty", map[string]any{"filter": map[string]any{"attributes": map[string]any{"": []string{"x"}}}}},
		{"51 attributes", map[string]any{"filter": map[string]any{"attributes": manyKeys(51)}}},
		{"data value an object", map[string]any{"filter": map[string]any{"data": map[string]any{"a": []any{map[string]any{}}}}}},
		{"data value an array", map[string]any{"filter": map[string]any{"data": map[string]any{"a": []any{[]any{1}}}}}},
		{"data values empty", map[string]any{"filter": map[string]any{"data": map[string]any{"a": []any{}}}}},
		{"data path empty segment", map[string]any{"filter": map[string]any{"data": map[string]any{"a..b": []any{1}}}}},
		{"data path empty", map[string]any{"filter": map[string]any{"data": map[string]any{"": []any{1}}}}},
		{"51 data paths", map[string]any{"filter": map[string]any{"data": manyKeys(51)}}},
		{"101 attribute values", map[string]any{"filter": map[string]any{"attributes": map[string]any{"r": repeat("v", 101)}}}},
		{"start yesterday", map[string]any{"start": "yesterday"}},
		{"start a date only", map[string]any{"start": "2024-01-01"}},
		{"start LATEST", map[string]any{"start": "LATEST"}},
		{"start a number", map[string]any{"start": 0}},
		{"ordered a string", map[string]any{"ordered": "yes"}},
		{"visibility -1", map[string]any{"visibility_timeout_seconds": -1}},
		{"visibility 43201", map[string]any{"visibility_timeout_seconds": 43201}},
		{"max_receives 0", map[string]any{"max_receives": 0}},
		{"retention 59", map[string]any{"retention_seconds": 59}},
		{"retention over 14 days", map[string]any{"retention_seconds": 1209601}},
		{"retry_min over retry_max", map[string]any{"retry_min_seconds": 10, "retry_max_seconds": 5}},
		{"queue-only field delay_seconds", map[string]any{"delay_seconds": 1}},
		{"queue-only field max_depth", map[string]any{"max_depth": 1}},
	}
	for _, b := range bodies {
		t.Run(b.name, func(t *testing.T) {
			env := forTest(env, t)
			requireProblem(t, env.Do("PUT", spath("t", "new"), b.body), bad, inv)
			requireProblem(t, env.Do("GET", spath("t", "new"), nil), http.StatusNotFound, "not_found")
			requireProblem(t, env.Do("PUT", spath("t", "ok"), b.body), bad, inv)
			require.Equal(t, before, getSub(t, env, "t", "ok"), "a refused PUT changes nothing")
		})
	}

	// Names are validated: the subscription's and the topic's.
	for _, n := range []string{"a b", ".hidden", "-dash", strings.Repeat("x", 129), "ünï", "a:b", "a*"} {
		t.Run("name "+n, func(t *testing.T) {
			env := forTest(env, t)
			requireProblem(t, env.Do("PUT", spath("t", n), `{}`), bad, inv)
			requireProblem(t, env.Do("GET", spath("t", n), nil), bad, inv)
			requireProblem(t, env.Do("DELETE", spath("t", n), nil), bad, inv)
			requireProblem(t, env.Do("POST", spath("t", n, "/receive"), nil), bad, inv)
			requireProblem(t, env.Do("POST", spath("t", n, "/seek"), map[string]any{"to": "latest"}), bad, inv)
			requireProblem(t, env.Do("GET", spath("t", n, "/dead-letters"), nil), bad, inv)
			requireProblem(t, env.Do("PUT", spath(n, "s"), `{}`), bad, inv)
			requireProblem(t, env.Do("GET", tpath(n, "/subscriptions"), nil), bad, inv)
		})
	}
	require.Len(t, listSubs(t, env, "t"), 1)

	// Seek bodies.
	for name, body := range map[string]any{
		"no body":       nil,
		"empty":         map[string]any{},
		"to null":       `{"to":null}`,
		"to yesterday":  map[string]any{"to": "yesterday"},
		"to a number":   map[string]any{"to": 1},
		"unknown field": map[string]any{"to": "latest", "from": "earliest"},
	} {
		t.Run("seek "+name, func(t *testing.T) {
			env := forTest(env, t)
			requireProblem(t, env.Do("POST", spath("t", "ok", "/seek"), body), bad, inv)
		})
	}

	// The queue routes' checks hold for subscriptions.
	for name, tc := range map[string]struct {
		action string
		body   any
	}{
		"receive max_messages 101": {"/receive", map[string]any{"max_messages": 101}},
		"receive wait 21":          {"/receive", map[string]any{"wait_seconds": 21}},
		"ack no receipts":          {"/ack", map[string]any{"receipts": []string{}}},
		"ack forged receipt":       {"/ack", map[string]any{"receipts": []string{"forged"}}},
		"nack delay -1":            {"/nack", map[string]any{"receipts": []string{"r"}, "delay_seconds": -1}},
		"extend without timeout":   {"/extend", map[string]any{"receipts": []string{"r"}}},
		"redrive ids and limit":    {"/dead-letters/redrive", map[string]any{"ids": []string{"a"}, "limit": 1}},
		"redrive nothing":          {"/dead-letters/redrive", map[string]any{}},
		"redrive empty id":         {"/dead-letters/redrive", map[string]any{"ids": []string{""}}},
	} {
		t.Run(name, func(t *testing.T) {
			env := forTest(env, t)
			requireProblem(t, env.Do("POST", spath("t", "ok", tc.action), tc.body), bad, inv)
		})
	}
	t.Run("dead letters bad cursor", func(t *testing.T) {
		env := forTest(env, t)
		requireProblem(t, env.Do("GET", spath("t", "ok", "/dead-letters")+"?after=zz", nil), bad, inv)
		requireProblem(t, env.Do("GET", spath("t", "ok", "/dead-letters")+"?limit=0", nil), bad, inv)
	})
	require.Equal(t, before, getSub(t, env, "t", "ok"))
}

func manyKeys(n int) map[string]any {
	m := map[string]any{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = []any{"v"}
	}
	return m
}

// TestSubscriptionFanOut: every subscription gets exactly the events its
// filter selects, each once, as the log has them; a backfill (start
// earliest, matched in SQL) selects the same events as the publish
// (matched in Go).
func TestSubscriptionFanOut(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "shop", map[string]any{"partitions": 2}, http.StatusCreated)
	filters := map[string]map[string]any{
		"a": nil,
		"b": {"types": []string{"order.*"}},
		"c": {"attributes": map[string]any{"region": []string{"eu"}}},
		"d": {"data": map[string]any{"customer.tier": []any{"gold"}}},
		"e": {"types": []string{"#.created"}},
		// All parts must match.
		"f": {"types": []string{"order.*"}, "attributes": map[string]any{"region": []string{"eu", "us"}}, "data": map[string]any{"customer.tier": []any{"gold", "silver"}}},
		// Numbers by value, booleans, null, array indexes.
		"g": {"data": map[string]any{"n": []any{2}, "flag": []any{true}}},
		"h": {"data": map[string]any{"items.1.sku": []any{"x"}}},
		"i": {"data": map[string]any{"gone": []any{nil}}},
	}
	for name, f := range filters {
		cfg := map[string]any{}
		if f != nil {
			cfg["filter"] = f
		}
		putSub(t, env, "shop", name, cfg, http.StatusCreated)
	}

	gold := map[string]any{"customer": map[string]any{"tier": "gold"}}
	events := []map[string]any{
		evt("order.created", "id", "e1", "key", "k1", "attributes", map[string]any{"region": "eu"}, "data", gold),
		evt("order.paid", "id", "e2", "attributes", map[string]any{"region": "us"}, "data", map[string]any{"customer": map[string]any{"tier": "silver"}}),
		evt("user.created", "id", "e3", "key", "k2", "data", gold),
		evt("order.item.added", "id", "e4", "attributes", map[string]any{"region": "eu", "x": "y"}),
		evt("created", "id", "e5", "key", "k1"),
		evt("order", "id", "e6", "attributes", map[string]any{"region": "EU"}),
		evt("shipment.created", "id", "e7", "attributes", map[string]any{"Region": "eu"}, "data", map[string]any{"customer": map[string]any{"tier": "Gold"}}),
		evt("x", "id", "e8", "data", map[string]any{"customer": map[string]any{"tier": []any{"gold"}}}),
		evt("x", "id", "e9", "data", "gold"),
		evt("order.refunded", "id", "e10", "key", "k3", "attributes", map[string]any{"region": "eu"}, "data", gold),
		evt("x", "id", "e11", "data", json.RawMessage(`{"n": 2.0, "flag": true}`)),
		evt("x", "id", "e12", "data", map[string]any{"n": 2, "flag": "true"}),
		evt("x", "id", "e13", "data", map[string]any{"items": []any{map[string]any{"sku": "a"}, map[string]any{"sku": "x"}}}),
		evt("x", "id", "e14", "data", map[string]any{"items": map[string]any{"1": map[string]any{"sku": "x"}}}),
		evt("x", "id", "e15", "data", map[string]any{"gone": nil}),
		evt("x", "id", "e16", "data", map[string]any{"customer": map[string]any{"tier": "gold", "extra": 1}}),
		// A duplicate of e1 in the batch: no second delivery.
		evt("order.created", "id", "e1"),
	}
	want := map[string][]string{
		"a": {"e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9", "e10", "e11", "e12", "e13", "e14", "e15", "e16"},
		"b": {"e1", "e2", "e10"},
		"c": {"e1", "e4", "e10"},
		"d": {"e1", "e3", "e10", "e16"},
		"e": {"e1", "e3", "e5", "e7"},
		"f": {"e1", "e2", "e10"},
		"g": {"e11"},
		"h": {"e13", "e14"},
		"i": {"e15"},
	}
	res := publishEvents(t, env, "shop", events...)
	require.True(t, res[len(res)-1].Duplicate)
	// A later duplicate is not delivered again either.
	require.True(t, publishEvents(t, env, "shop", evt("order.created", "id", "e2"))[0].Duplicate)

	log := logEvents(t, env, "shop")
	require.Len(t, log, 16)
	check := func(t *testing.T, sub string, wantIDs []string) {
		t.Helper()
		env := forTest(env, t)
		require.Equal(t, client.QueueStats{Available: int64(len(wantIDs))}, subCounts(t, env, "shop", sub), "subscription %s", sub)
		got := receiveAll(t, env, "shop", sub)
		require.Equal(t, sortedCopy(wantIDs), sortedCopy(subIDs(got)), "subscription %s receives exactly its events, each once", sub)
		for _, m := range got {
			require.Equal(t, 1, m.ReceiveCount)
			requireSameEvent(t, log[m.ID], m.Event, sub+" "+m.ID)
		}
		require.Empty(t, receiveAll(t, env, "shop", sub), "subscription %s: nothing more", sub)
		require.Equal(t, client.QueueStats{InFlight: int64(len(wantIDs))}, subCounts(t, env, "shop", sub))
	}
	for sub, ids := range want {
		t.Run("live "+sub, func(t *testing.T) { check(t, sub, ids) })
	}

	// The same filters over the retained events, matched by the backfill.
	for name, f := range filters {
		cfg := map[string]any{"start": "earliest"}
		if f != nil {
			cfg["filter"] = f
		}
		putSub(t, env, "shop", "backfill-"+name, cfg, http.StatusCreated)
	}
	for sub, ids := range want {
		t.Run("backfilled "+sub, func(t *testing.T) { check(t, "backfill-"+sub, ids) })
	}
}

// TestSubscriptionTypePatterns: the pattern semantics of API.md, both as a
// publish matches them and as a backfill does.
func TestSubscriptionTypePatterns(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "p", map[string]any{"partitions": 1}, http.StatusCreated)
	types := []string{"order.created", "order", "orders.created", "order.item.added", "x.created", "a.b.created", "created", "Order.created", "a+b", "aab", "a.b", "axb"}
	cases := []struct {
		patterns []string
		matches  []string
	}{
		{[]string{"order.*"}, []string{"order.created"}},
		{[]string{"order.#"}, []string{"order.created", "order", "order.item.added"}},
		{[]string{"#"}, types},
		{[]string{"*.created"}, []string{"order.created", "orders.created", "x.created", "Order.created"}},
		{[]string{"#.created"}, []string{"order.created", "orders.created", "x.created", "a.b.created", "created", "Order.created"}},
		{[]string{"order"}, []string{"order"}},
		{[]string{"Order.*"}, []string{"Order.created"}},
		{[]string{"order.#.added"}, []string{"order.item.added"}},
		{[]string{"*"}, []string{"order", "created", "a+b", "aab", "axb"}},
		{[]string{"*.*"}, []string{"order.created", "orders.created", "x.created", "Order.created", "a.b"}},
		{[]string{"order", "x.*"}, []string{"order", "x.created"}},
		{[]string{"a+b"}, []string{"a+b"}},
		{[]string{"a.b"}, []string{"a.b"}},
		{[]string{"ord"}, nil},
	}
	for i, c := range cases {
		putSub(t, env, "p", fmt.Sprintf("live%d", i), map[string]any{"filter": map[string]any{"types": c.patterns}}, http.StatusCreated)
	}
	batch := make([]map[string]any, len(types))
	for i, typ := range types {
		batch[i] = evt(typ, "id", "id-"+typ)
	}
	publishEvents(t, env, "p", batch...)
	for i, c := range cases {
		putSub(t, env, "p", fmt.Sprintf("backfill%d", i), map[string]any{"filter": map[string]any{"types": c.patterns}, "start": "earliest"}, http.StatusCreated)
	}
	for i, c := range cases {
		for _, kind := range []string{"live", "backfill"} {
			got := receiveAll(t, env, "p", fmt.Sprintf("%s%d", kind, i))
			gotTypes := []string{}
			for _, m := range got {
				gotTypes = append(gotTypes, m.Event.Type)
			}
			require.Equal(t, sortedCopy(c.matches), sortedCopy(gotTypes), "%s: patterns %q", kind, c.patterns)
		}
	}
}

func TestSubscriptionAckNackDeadLetters(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "t", map[string]any{"partitions": 2}, http.StatusCreated)
	putSub(t, env, "t", "w", map[string]any{"retry_min_seconds": 0, "retry_max_seconds": 0}, http.StatusCreated)
	putSub(t, env, "t", "dl", map[string]any{"max_receives": 1}, http.StatusCreated)

	publishEvents(t, env, "t", evt("a", "id", "e1"), evt("b", "id", "e2", "key", "k", "data", map[string]any{"n": 1}))
	log := logEvents(t, env, "t")

	// Ack removes; a repeated ack is stale. Extend keeps a claim.
	got := receiveAll(t, env, "t", "w")
	require.ElementsMatch(t, []string{"e1", "e2"}, subIDs(got))
	require.Equal(t, client.QueueStats{InFlight: 2}, subCounts(t, env, "t", "w"))
	require.Equal(t, []string{"ok"}, settleSub(t, env, "t", "w", "extend", map[string]any{"receipts": []string{got[0].Receipt}, "visibility_timeout_seconds": 120}))
	require.Equal(t, []string{"ok", "ok"}, ackSub(t, env, "t", "w", subReceipts(got)...))
	require.Equal(t, client.QueueStats{}, subCounts(t, env, "t", "w"))
	require.Equal(t, []string{"stale", "stale"}, ackSub(t, env, "t", "w", subReceipts(got)...))
	require.Equal(t, []string{"stale"}, settleSub(t, env, "t", "w", "extend", map[string]any{"receipts": []string{got[0].Receipt}, "visibility_timeout_seconds": 1}))
	// Acking one subscription's delivery leaves the other's.
	require.Equal(t, client.QueueStats{Available: 2}, subCounts(t, env, "t", "dl"))
	require.Len(t, logEvents(t, env, "t"), 2, "acking does not touch the log")

	// A receipt of one subscription is stale on another.
	publishEvents(t, env, "t", evt("c", "id", "e3"))
	w := receiveAll(t, env, "t", "w")
	require.Equal(t, []string{"e3"}, subIDs(w))
	require.Equal(t, []string{"stale"}, ackSub(t, env, "t", "dl", w[0].Receipt))
	require.Equal(t, client.QueueStats{InFlight: 1}, subCounts(t, env, "t", "w"))

	// Nack with delay 0 redelivers at once, receive_count 2, new receipt.
	require.Equal(t, []string{"ok"}, settleSub(t, env, "t", "w", "nack", map[string]any{"receipts": []string{w[0].Receipt}, "delay_seconds": 0, "error": "first try"}))
	again := receiveAll(t, env, "t", "w")
	require.Equal(t, []string{"e3"}, subIDs(again))
	require.Equal(t, 2, again[0].ReceiveCount)
	require.NotEqual(t, w[0].Receipt, again[0].Receipt)
	require.Equal(t, []string{"stale"}, ackSub(t, env, "t", "w", w[0].Receipt))
	requireSameEvent(t, logEvents(t, env, "t")["e3"], again[0].Event, "redelivered e3")
	require.Equal(t, []string{"ok"}, ackSub(t, env, "t", "w", again[0].Receipt))

	// max_receives 1: a nack dead-letters; the dead letter is the event.
	dl := receiveAll(t, env, "t", "dl")
	require.ElementsMatch(t, []string{"e1", "e2", "e3"}, subIDs(dl))
	var e2 client.Delivery
	var others []string
	for _, m := range dl {
		if m.ID == "e2" {
			e2 = m
		} else {
			others = append(others, m.Receipt)
		}
	}
	require.Equal(t, []string{"ok"}, settleSub(t, env, "t", "dl", "nack", map[string]any{"receipts": []string{e2.Receipt}, "error": "boom"}))
	require.Equal(t, client.QueueStats{InFlight: 2, DeadLetters: 1}, subCounts(t, env, "t", "dl"))
	page := subDeadLetters(t, env, "t", "dl", "")
	require.Nil(t, page.Next)
	require.Len(t, page.Messages, 1)
	d := page.Messages[0]
	require.Equal(t, "e2", d.ID)
	requireSameEvent(t, log["e2"], d.Event, "dead letter")
	require.Equal(t, 1, d.ReceiveCount)
	require.NotNil(t, d.LastError)
	require.Equal(t, "boom", *d.LastError)
	require.WithinDuration(t, time.Now(), d.DeadLetteredAt, time.Minute)
	require.Empty(t, receiveAll(t, env, "t", "dl"))

	// Redrive by event id (unknown ids skipped): back, receive_count reset.
	require.Equal(t, 1, redriveSub(t, env, "t", "dl", map[string]any{"ids": []string{"e2", "nope", "e1"}}))
	require.Equal(t, client.QueueStats{Available: 1, InFlight: 2}, subCounts(t, env, "t", "dl"))
	require.Equal(t, 0, redriveSub(t, env, "t", "dl", map[string]any{"ids": []string{"e2"}}), "no longer a dead letter")
	back := receiveAll(t, env, "t", "dl")
	require.Equal(t, []string{"e2"}, subIDs(back))
	require.Equal(t, 1, back[0].ReceiveCount)
	requireSameEvent(t, log["e2"], back[0].Event, "redriven")

	// dead_letter: true, then redrive by limit, then purge.
	require.Equal(t, repeat("ok", 3), settleSub(t, env, "t", "dl", "nack", map[string]any{"receipts": append(others, back[0].Receipt), "dead_letter": true}))
	page = subDeadLetters(t, env, "t", "dl", "?limit=2")
	require.Len(t, page.Messages, 2)
	require.NotNil(t, page.Next)
	rest := subDeadLetters(t, env, "t", "dl", "?limit=2&after="+url.QueryEscape(*page.Next))
	require.Len(t, rest.Messages, 1)
	require.Nil(t, rest.Next)
	all := []string{page.Messages[0].ID, page.Messages[1].ID, rest.Messages[0].ID}
	require.ElementsMatch(t, []string{"e1", "e2", "e3"}, all)
	require.Equal(t, 1, redriveSub(t, env, "t", "dl", map[string]any{"limit": 1}))
	require.Equal(t, client.QueueStats{Available: 1, DeadLetters: 2}, subCounts(t, env, "t", "dl"))
	r := env.Do("DELETE", spath("t", "dl", "/dead-letters"), nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	require.Empty(t, r.Body)
	require.Empty(t, subDeadLetters(t, env, "t", "dl", "").Messages)
	require.Equal(t, client.QueueStats{Available: 1}, subCounts(t, env, "t", "dl"))
	require.Equal(t, 0, redriveSub(t, env, "t", "dl", map[string]any{"limit": 10}))

	// Receiving with max_receives used up dead-letters on the next claim
	// (an expired lease), as for a queue.
	last := receiveSub(t, env, "t", "dl", map[string]any{"visibility_timeout_seconds": 1})
	require.Len(t, last, 1)
	require.Eventually(t, func() bool {
		require.Empty(t, receiveAll(t, env, "t", "dl"))
		return subCounts(t, env, "t", "dl") == client.QueueStats{DeadLetters: 1}
	}, 10*time.Second, 50*time.Millisecond, "the claim after the lease ends dead-letters it")
	require.Equal(t, []string{last[0].ID}, []string{subDeadLetters(t, env, "t", "dl", "").Messages[0].ID})
}

// TestSubscriptionOrdered: events sharing a key come one at a time in
// offset order, across publishes; keyless events are unordered.
func TestSubscriptionOrdered(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "o", map[string]any{"partitions": 2}, http.StatusCreated)
	putSub(t, env, "o", "seq", map[string]any{"ordered": true}, http.StatusCreated)
	putSub(t, env, "o", "par", nil, http.StatusCreated)

	publishEvents(t, env, "o",
		evt("t", "id", "K1", "key", "K"), evt("t", "id", "K2", "key", "K"),
		evt("t", "id", "L1", "key", "L"), evt("t", "id", "K3", "key", "K"))
	publishEvents(t, env, "o", evt("t", "id", "K4", "key", "K"))

	// Unordered: everything at once.
	require.ElementsMatch(t, []string{"K1", "K2", "L1", "K3", "K4"}, subIDs(receiveAll(t, env, "o", "par")))

	// Ordered: the head of each key.
	first := receiveAll(t, env, "o", "seq")
	require.ElementsMatch(t, []string{"K1", "L1"}, subIDs(first))
	require.Empty(t, receiveAll(t, env, "o", "seq"), "K2 waits for K1")
	require.Equal(t, client.QueueStats{Available: 3, InFlight: 2}, subCounts(t, env, "o", "seq"), "waiting deliveries count as available")
	byID := map[string]client.Delivery{}
	for _, m := range first {
		byID[m.ID] = m
	}
	require.Equal(t, []string{"ok"}, ackSub(t, env, "o", "seq", byID["K1"].Receipt))
	k2 := receiveAll(t, env, "o", "seq")
	require.Equal(t, []string{"K2"}, subIDs(k2))

	// Keyless events are not held back by anything.
	publishEvents(t, env, "o", evt("t", "id", "n1"), evt("t", "id", "n2"), evt("t", "id", "n3"))
	require.ElementsMatch(t, []string{"n1", "n2", "n3"}, subIDs(receiveAll(t, env, "o", "seq")))

	// A nack keeps the key's order: K2 comes again before K3.
	require.Equal(t, []string{"ok"}, settleSub(t, env, "o", "seq", "nack", map[string]any{"receipts": []string{k2[0].Receipt}, "delay_seconds": 0}))
	k2 = receiveAll(t, env, "o", "seq")
	require.Equal(t, []string{"K2"}, subIDs(k2))
	require.Equal(t, 2, k2[0].ReceiveCount)

	// The rest of K in offset order, across the two publishes.
	var order []string
	next := k2
	for len(next) > 0 {
		require.Len(t, next, 1)
		order = append(order, next[0].ID)
		require.Equal(t, []string{"ok"}, ackSub(t, env, "o", "seq", next[0].Receipt))
		next = receiveAll(t, env, "o", "seq")
	}
	require.Equal(t, []string{"K2", "K3", "K4"}, order)
	// Offsets of K grow in that order.
	log := logEvents(t, env, "o")
	require.Less(t, log["K1"].Offset, log["K2"].Offset)
	require.Less(t, log["K3"].Offset, log["K4"].Offset)
}

// TestSubscriptionStart: start on creation backfills retained events;
// later PUTs ignore it.
func TestSubscriptionStart(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "s", map[string]any{"partitions": 2}, http.StatusCreated)
	for i := 1; i <= 3; i++ {
		publishEvents(t, env, "s", evt("t", "id", fmt.Sprintf("e%d", i), "key", fmt.Sprintf("key%d", i)))
	}
	log := logEvents(t, env, "s")
	require.True(t, log["e1"].PublishedAt.Before(log["e2"].PublishedAt))
	require.True(t, log["e2"].PublishedAt.Before(log["e3"].PublishedAt))

	// Backfilled deliveries are available at once and come in publish order.
	earliest := putSub(t, env, "s", "earliest", map[string]any{"start": "earliest"}, http.StatusCreated)
	require.EqualValues(t, 3, earliest.Stats.Available, "the answer's stats include the backfill")
	got := receiveSub(t, env, "s", "earliest", map[string]any{"max_messages": 10})
	require.Equal(t, []string{"e1", "e2", "e3"}, subIDs(got))
	for _, m := range got {
		requireSameEvent(t, log[m.ID], m.Event, "backfilled "+m.ID)
	}

	// A time: inclusive, in any zone.
	at := log["e2"].PublishedAt
	for i, ts := range []string{at.UTC().Format(time.RFC3339Nano), at.In(time.FixedZone("x", -5*3600)).Format(time.RFC3339Nano)} {
		name := fmt.Sprintf("time%d", i)
		putSub(t, env, "s", name, map[string]any{"start": ts}, http.StatusCreated)
		require.Equal(t, client.QueueStats{Available: 2}, subCounts(t, env, "s", name), "start %s", ts)
		require.Equal(t, []string{"e2", "e3"}, subIDs(receiveSub(t, env, "s", name, map[string]any{"max_messages": 10})))
	}
	putSub(t, env, "s", "future", map[string]any{"start": time.Now().Add(time.Hour).Format(time.RFC3339)}, http.StatusCreated)
	putSub(t, env, "s", "past", map[string]any{"start": "2000-01-01T00:00:00Z"}, http.StatusCreated)
	require.Equal(t, client.QueueStats{}, subCounts(t, env, "s", "future"))
	require.Equal(t, client.QueueStats{Available: 3}, subCounts(t, env, "s", "past"))

	// latest, by default or by name: nothing retained.
	putSub(t, env, "s", "default", nil, http.StatusCreated)
	putSub(t, env, "s", "latest", map[string]any{"start": "latest"}, http.StatusCreated)
	require.Equal(t, client.QueueStats{}, subCounts(t, env, "s", "default"))
	require.Equal(t, client.QueueStats{}, subCounts(t, env, "s", "latest"))

	// A backfill applies the filter.
	putSub(t, env, "s", "filtered", map[string]any{"start": "earliest", "filter": map[string]any{"data": map[string]any{"missing": []any{1}}}}, http.StatusCreated)
	require.Equal(t, client.QueueStats{}, subCounts(t, env, "s", "filtered"))

	// start on an existing subscription is ignored: 200, no backfill.
	upd := putSub(t, env, "s", "default", map[string]any{"start": "earliest"}, http.StatusOK)
	require.Equal(t, client.QueueStats{}, upd.Stats)
	putSub(t, env, "s", "default", map[string]any{"start": "earliest", "max_receives": 3}, http.StatusOK)
	require.Equal(t, client.QueueStats{}, subCounts(t, env, "s", "default"))
	// Nor does it rewind one that was backfilled and consumed.
	require.Equal(t, repeat("ok", 3), ackSub(t, env, "s", "earliest", subReceipts(got)...))
	putSub(t, env, "s", "earliest", map[string]any{"start": "earliest"}, http.StatusOK)
	require.Equal(t, client.QueueStats{}, subCounts(t, env, "s", "earliest"))

	// Every one of them gets the next event, once.
	publishEvents(t, env, "s", evt("t", "id", "e4"))
	for _, name := range []string{"earliest", "time0", "time1", "future", "past", "default", "latest"} {
		got := receiveAll(t, env, "s", name)
		ids := subIDs(got)
		require.Contains(t, ids, "e4", name)
		require.Equal(t, 1, strings.Count(strings.Join(ids, ","), "e4"), name)
	}
}

// TestSubscriptionSeek: seek drops pending deliveries and delivers the
// retained events from the point again.
func TestSubscriptionSeek(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "k", map[string]any{"partitions": 2}, http.StatusCreated)
	putSub(t, env, "k", "s", nil, http.StatusCreated)
	for i := 1; i <= 3; i++ {
		publishEvents(t, env, "k", evt("t", "id", fmt.Sprintf("e%d", i)))
	}
	log := logEvents(t, env, "k")
	got := receiveAll(t, env, "k", "s")
	require.Len(t, got, 3)
	require.Equal(t, repeat("ok", 3), ackSub(t, env, "k", "s", subReceipts(got)...))
	require.Equal(t, client.QueueStats{}, subCounts(t, env, "k", "s"))

	// earliest: everything again, in publish order.
	seekSub(t, env, "k", "s", "earliest")
	require.Equal(t, client.QueueStats{Available: 3}, subCounts(t, env, "k", "s"))
	first := receiveSub(t, env, "k", "s", map[string]any{"max_messages": 1})
	require.Equal(t, []string{"e1"}, subIDs(first))
	requireSameEvent(t, log["e1"], first[0].Event, "sought e1")
	// earliest again while e1 is in flight: its receipt goes stale, the
	// three are pending once each.
	seekSub(t, env, "k", "s", "earliest")
	require.Equal(t, client.QueueStats{Available: 3}, subCounts(t, env, "k", "s"))
	require.Equal(t, []string{"stale"}, ackSub(t, env, "k", "s", first[0].Receipt))
	inFlight := receiveSub(t, env, "k", "s", map[string]any{"max_messages": 1})
	require.Equal(t, []string{"e1"}, subIDs(inFlight))

	// latest: nothing pending, in-flight receipts stale.
	seekSub(t, env, "k", "s", "latest")
	require.Equal(t, client.QueueStats{}, subCounts(t, env, "k", "s"))
	require.Equal(t, []string{"stale"}, ackSub(t, env, "k", "s", inFlight[0].Receipt))
	require.Equal(t, []string{"stale"}, settleSub(t, env, "k", "s", "nack", map[string]any{"receipts": []string{inFlight[0].Receipt}}))
	require.Empty(t, receiveAll(t, env, "k", "s"))

	// A time: inclusive.
	seekSub(t, env, "k", "s", log["e2"].PublishedAt.Format(time.RFC3339Nano))
	require.Equal(t, client.QueueStats{Available: 2}, subCounts(t, env, "k", "s"))
	require.Equal(t, []string{"e2", "e3"}, subIDs(receiveAll(t, env, "k", "s")))
	seekSub(t, env, "k", "s", time.Now().Add(time.Hour).Format(time.RFC3339))
	require.Equal(t, client.QueueStats{}, subCounts(t, env, "k", "s"))

	// Dead letters stay; the filter in force applies.
	putSub(t, env, "k", "s", map[string]any{"max_receives": 1, "filter": map[string]any{"types": []string{"t"}}}, http.StatusOK)
	publishEvents(t, env, "k", evt("t", "id", "e4"), evt("u", "id", "u1"))
	dead := receiveAll(t, env, "k", "s")
	require.Equal(t, []string{"e4"}, subIDs(dead))
	settleSub(t, env, "k", "s", "nack", map[string]any{"receipts": subReceipts(dead)})
	require.Equal(t, client.QueueStats{DeadLetters: 1}, subCounts(t, env, "k", "s"))
	putSub(t, env, "k", "s", map[string]any{"filter": map[string]any{"types": []string{"u"}}}, http.StatusOK)
	seekSub(t, env, "k", "s", "earliest")
	require.Equal(t, client.QueueStats{Available: 1, DeadLetters: 1}, subCounts(t, env, "k", "s"))
	require.Equal(t, []string{"u1"}, subIDs(receiveAll(t, env, "k", "s")))

	// Later events still arrive after a seek.
	seekSub(t, env, "k", "s", "latest")
	publishEvents(t, env, "k", evt("u", "id", "u2"))
	require.Equal(t, []string{"u2"}, subIDs(receiveAll(t, env, "k", "s")))

	// A dead letter whose event is pending again after a seek: redriving
	// it drops it in favour of the pending delivery (not counted).
	putSub(t, env, "k", "s", map[string]any{"filter": map[string]any{"types": []string{"t"}}}, http.StatusOK)
	seekSub(t, env, "k", "s", "earliest")
	require.Equal(t, client.QueueStats{Available: 4, DeadLetters: 1}, subCounts(t, env, "k", "s"))
	require.Equal(t, 0, redriveSub(t, env, "k", "s", map[string]any{"ids": []string{"e4"}}))
	require.Equal(t, client.QueueStats{Available: 4}, subCounts(t, env, "k", "s"))
	require.Equal(t, []string{"e1", "e2", "e3", "e4"}, subIDs(receiveAll(t, env, "k", "s")))
}

// TestSubscriptionChangesDuringPublishes: creating (with start earliest),
// seeking and deleting subscriptions while publishes run loses no event
// and doubles none. A publish that meets subscription changes may be
// refused with 503 (nothing written, retry), as a client then retries.
func TestSubscriptionChangesDuringPublishes(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "busy", map[string]any{"partitions": 3}, http.StatusCreated)
	putSub(t, env, "busy", "doomed", nil, http.StatusCreated)
	putSub(t, env, "busy", "sought", nil, http.StatusCreated)

	const publishers, rounds = 4, 15
	results := make(chan asyncResult, publishers*rounds)
	stop := make(chan struct{})
	var (
		wg      sync.WaitGroup
		refused atomic.Int64
	)
	for p := range publishers {
		wg.Go(func() {
			for i := range rounds {
				batch := map[string]any{"events": []any{
					evt("t", "id", fmt.Sprintf("p%d-%d-a", p, i), "key", fmt.Sprintf("k%d", i%5)),
					evt("t", "id", fmt.Sprintf("p%d-%d-b", p, i)),
				}}
				res := doAsync(env, "POST", tpath("busy", "/events"), batch)
				for try := 0; try < 50 && res.err == nil && res.status == http.StatusServiceUnavailable; try++ {
					refused.Add(1)
					res = doAsync(env, "POST", tpath("busy", "/events"), batch)
				}
				results <- res
			}
		})
	}
	go func() { wg.Wait(); close(stop) }()

	// Changes while the publishes run (the last ones may come after them).
	changed := 0
	for i := 0; i < 10; i++ {
		putSub(t, env, "busy", fmt.Sprintf("late%d", i), map[string]any{"start": "earliest"}, http.StatusCreated)
		seekSub(t, env, "busy", "sought", "earliest")
		changed++
		if i < 2 {
			continue // the delete below always happens, however fast the publishes are
		}
		if i == 2 {
			r := env.Do("DELETE", spath("busy", "doomed"), nil)
			require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
		}
		select {
		case <-stop:
		default:
			continue
		}
		break
	}
	<-stop
	close(results)
	t.Logf("%d publishes refused with 503 and retried", refused.Load())
	for res := range results {
		requireStatus(t, res, http.StatusCreated)
	}

	log := logEvents(t, env, "busy")
	require.Len(t, log, publishers*rounds*2)
	all := make([]string, 0, len(log))
	for id := range log {
		all = append(all, id)
	}
	for _, sub := range append([]string{"sought"}, func() []string {
		var names []string
		for i := range changed {
			names = append(names, fmt.Sprintf("late%d", i))
		}
		return names
	}()...) {
		var got []string
		for {
			ms := receiveAll(t, env, "busy", sub)
			if len(ms) == 0 {
				break
			}
			for _, m := range ms {
				requireSameEvent(t, log[m.ID], m.Event, sub)
			}
			got = append(got, subIDs(ms)...)
		}
		require.Equal(t, sortedCopy(all), sortedCopy(got), "%s holds every event once", sub)
	}
	requireProblem(t, env.Do("GET", spath("busy", "doomed"), nil), http.StatusNotFound, "not_found")
}

// Type patterns a client could make expensive for every publish and every
// backfill are refused: the attack of 100 patterns of 255 bytes
// alternating # and a word (each a 400 that names the pattern and the
// limit), more than 8 # in a pattern, patterns over 8192 bytes together,
// a filter over 64 KiB. Nothing is written.
func TestSubscriptionFilterComplexityRefused(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "t", map[string]any{"partitions": 1}, http.StatusCreated)
	attack := strings.Repeat("#.a.", 63) + "#.a"
	for _, c := range []struct {
		name   string
		filter map[string]any
		field  string
		detail string
	}{
		{"the attack", map[string]any{"types": repeat(attack, 100)}, "filter.types[0]", "at most 8 # wildcards"},
		{"9 #", map[string]any{"types": []string{"a.*", strings.Repeat("#.a.", 9) + "b"}}, "filter.types[1]", "at most 8 # wildcards"},
		{"types over 8192 bytes", map[string]any{"types": repeat(strings.Repeat("x", 200), 41)}, "filter.types", "at most 8192 bytes together"},
		{"filter over 64 KiB", map[string]any{"attributes": map[string]any{"k": repeat(strings.Repeat("v", 4000), 20)}}, "filter", "at most 65536 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := forTest(env, t)
			for _, path := range []string{spath("t", "new"), spath("t", "new2")} {
				r := env.Do("PUT", path, map[string]any{"filter": c.filter, "start": "earliest"})
				p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
				require.Contains(t, p["detail"], c.field+": ")
				require.Contains(t, p["detail"], c.detail)
			}
			requireProblem(t, env.Do("GET", spath("t", "new"), nil), http.StatusNotFound, "not_found")
		})
	}
	require.Empty(t, listSubs(t, env, "t"))
}

// worstPatterns is the costliest type filter the limits allow: 100
// patterns of 81 bytes (8192 together), each with 8 #, matching types of
// 8 "a", a digit and 24 "a".
func worstPatterns() []string {
	out := make([]string, 100)
	for i := range out {
		out[i] = strings.Repeat("#.a.", 8) + fmt.Sprint(i%10) + strings.Repeat(".a", 24)
	}
	return out
}

// The costliest filter allowed bounds the work of a backfill, a seek and
// the publishes: over 10,000 events whose types keep every pattern alive
// to their last word, each answers within a bound far above what it
// takes (a safety net, not a measurement; the attack's patterns took
// about 70 s to backfill), with exactly the events that match.
func TestSubscriptionWorstFilterIsBounded(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "log", map[string]any{"partitions": 4}, http.StatusCreated)
	matching := strings.Repeat("a.", 8) + "3" + strings.Repeat(".a", 24)
	costly := strings.Repeat("a.", 120) + "3." + strings.Repeat("a.", 5) + "b" // 255 bytes, 128 words
	batch := func(round int) []map[string]any {
		evs := make([]map[string]any, 1000)
		for i := range evs {
			typ := costly
			if i%4 == 0 {
				typ = matching
			}
			evs[i] = evt(typ, "id", fmt.Sprintf("e%d-%d", round, i), "key", fmt.Sprintf("k%d", i%50))
		}
		return evs
	}
	for round := range 10 {
		publishEvents(t, env, "log", batch(round)...)
	}
	const bound = 30 * time.Second // the attack took ~70 s; -race on a loaded 2-core machine took up to 16 s
	filter := map[string]any{"types": worstPatterns()}
	for _, ordered := range []bool{false, true} {
		name := fmt.Sprintf("ordered-%v", ordered)
		began := time.Now()
		s := putSub(t, env, "log", name, map[string]any{"filter": filter, "ordered": ordered, "start": "earliest"}, http.StatusCreated)
		require.Less(t, time.Since(began), bound, "the backfill of %s", name)
		require.EqualValues(t, 2500, s.Stats.Available, "%s: the matching events, each once", name)

		began = time.Now()
		r := env.Do("POST", spath("log", name, "/seek"), map[string]any{"to": "earliest"})
		require.Equal(t, http.StatusNoContent, r.Status, "seek: %s", r.Body)
		require.Less(t, time.Since(began), bound, "the seek of %s", name)
		require.EqualValues(t, 2500, subCounts(t, env, "log", name).Available)
	}

	// Publishing to the subscriptions matches every event against the
	// patterns.
	began := time.Now()
	publishEvents(t, env, "log", batch(10)...)
	require.Less(t, time.Since(began), bound, "a publish of 1,000 costly events")
	require.EqualValues(t, 2750, subCounts(t, env, "log", "ordered-false").Available)
}

// TestSubscriptionFilterChange: a changed filter applies to events
// published after the change; deliveries already made stay.
func TestSubscriptionFilterChange(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "f", map[string]any{"partitions": 2}, http.StatusCreated)
	putSub(t, env, "f", "s", map[string]any{"filter": map[string]any{"types": []string{"a"}}}, http.StatusCreated)
	putSub(t, env, "f", "o", map[string]any{"ordered": false}, http.StatusCreated)
	publishEvents(t, env, "f", evt("a", "id", "a1"), evt("b", "id", "b1"))
	upd := putSub(t, env, "f", "s", map[string]any{"filter": map[string]any{"types": []string{"b"}}}, http.StatusOK)
	require.JSONEq(t, `{"types":["b"]}`, jsonOf(t, upd.Filter))
	require.EqualValues(t, 1, upd.Stats.Available)
	publishEvents(t, env, "f", evt("a", "id", "a2"), evt("b", "id", "b2"))
	require.ElementsMatch(t, []string{"a1", "b2"}, subIDs(receiveAll(t, env, "f", "s")))

	// ordered changes apply to later events too.
	putSub(t, env, "f", "o", map[string]any{"ordered": true}, http.StatusOK)
	require.Len(t, receiveAll(t, env, "f", "o"), 4)
	publishEvents(t, env, "f", evt("x", "id", "x1", "key", "k"), evt("x", "id", "x2", "key", "k"))
	require.Equal(t, []string{"x1"}, subIDs(receiveAll(t, env, "f", "o")))
}

// TestSubscriptionsOfDeletedTopic: deleting a topic deletes its
// subscriptions and, in the background, their deliveries.
func TestSubscriptionsOfDeletedTopic(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "gone", nil, http.StatusCreated)
	putSub(t, env, "gone", "s", nil, http.StatusCreated)
	putSub(t, env, "gone", "s2", map[string]any{"max_receives": 1}, http.StatusCreated)
	publishEvents(t, env, "gone", evt("t", "id", "e1"), evt("t", "id", "e2"))
	got := receiveSub(t, env, "gone", "s2", map[string]any{"max_messages": 1})
	settleSub(t, env, "gone", "s2", "nack", map[string]any{"receipts": subReceipts(got), "dead_letter": true})
	receipt := receiveSub(t, env, "gone", "s", map[string]any{"max_messages": 1})[0].Receipt

	r := env.Do("DELETE", tpath("gone"), nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	requireProblem(t, env.Do("GET", spath("gone", "s"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("GET", tpath("gone", "/subscriptions"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("POST", spath("gone", "s", "/receive"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("POST", spath("gone", "s", "/ack"), map[string]any{"receipts": []string{receipt}}), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("GET", spath("gone", "s2", "/dead-letters"), nil), http.StatusNotFound, "not_found")

	// The name again: a topic without subscriptions.
	putTopic(t, env, "gone", nil, http.StatusCreated)
	require.Empty(t, listSubs(t, env, "gone"))
	requireProblem(t, env.Do("GET", spath("gone", "s"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("POST", spath("gone", "s", "/receive"), nil), http.StatusNotFound, "not_found")
	fresh := putSub(t, env, "gone", "s", nil, http.StatusCreated)
	require.Equal(t, client.QueueStats{}, fresh.Stats, "a new subscription, nothing of the old one")

	// The deleted subscriptions' deliveries and dead letters are cleaned up.
	eventuallyNone(t, env, `
			SELECT (SELECT count(*) FROM ferry.messages m WHERE NOT EXISTS (SELECT FROM ferry.queues q WHERE q.id = m.queue_id))
			     + (SELECT count(*) FROM ferry.dead_letters d WHERE NOT EXISTS (SELECT FROM ferry.queues q WHERE q.id = d.queue_id))`, "the deleted subscriptions' deliveries and dead letters are removed")
}

// TestSubscriptionAndQueueShareName: queue names and subscription names
// are apart.
func TestSubscriptionAndQueueShareName(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "t", map[string]any{"partitions": 1}, http.StatusCreated)

	// Subscription first, then the queue; and the other way round.
	putSub(t, env, "t", "x", nil, http.StatusCreated)
	r := env.Do("PUT", qpath("x"), nil)
	require.Equal(t, http.StatusCreated, r.Status, "a queue x is new: %s", r.Body)
	r = env.Do("PUT", qpath("y"), map[string]any{"max_receives": 9})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	y := putSub(t, env, "t", "y", nil, http.StatusCreated)
	require.Equal(t, 5, y.MaxReceives, "the queue's settings are not the subscription's")
	require.Equal(t, 9, getQueue(t, env, "y").MaxReceives)

	// Sends go to the queue, publishes to the subscription.
	send(t, env, "x", msg("hello"))
	require.Equal(t, client.QueueStats{}, subCounts(t, env, "t", "x"))
	require.Equal(t, client.QueueStats{Available: 1}, counts(t, env, "x"))
	publishEvents(t, env, "t", evt("t", "id", "e1"))
	require.Equal(t, client.QueueStats{Available: 1}, subCounts(t, env, "t", "x"))
	require.Equal(t, client.QueueStats{Available: 1}, counts(t, env, "x"))
	qm := receive(t, env, "x", map[string]any{"max_messages": 10})
	require.Len(t, qm, 1)
	require.JSONEq(t, `"hello"`, string(qm[0].Body))
	sm := receiveAll(t, env, "t", "x")
	require.Equal(t, []string{"e1"}, subIDs(sm))
	// Receipts do not cross over.
	require.Equal(t, []string{"stale"}, ack(t, env, "x", sm[0].Receipt))
	require.Equal(t, []string{"stale"}, ackSub(t, env, "t", "x", qm[0].Receipt))
	require.Equal(t, []string{"ok"}, ack(t, env, "x", qm[0].Receipt))
	require.Equal(t, []string{"ok"}, ackSub(t, env, "t", "x", sm[0].Receipt))

	// GET /v1/queues lists queues only.
	r = env.Do("GET", "/v1/queues", nil)
	require.Equal(t, http.StatusOK, r.Status)
	var ql struct {
		Queues []client.Queue `json:"queues"`
	}
	r.JSON(t, &ql)
	names := []string{}
	for _, q := range ql.Queues {
		names = append(names, q.Name)
	}
	require.Equal(t, []string{"x", "y"}, names)

	// Deleting one leaves the other.
	r = env.Do("DELETE", qpath("x"), nil)
	require.Equal(t, http.StatusNoContent, r.Status)
	require.Equal(t, "x", getSub(t, env, "t", "x").Name)
	r = env.Do("DELETE", spath("t", "y"), nil)
	require.Equal(t, http.StatusNoContent, r.Status)
	require.Equal(t, 9, getQueue(t, env, "y").MaxReceives)
	requireProblem(t, env.Do("GET", qpath("x"), nil), http.StatusNotFound, "not_found")
}

// TestSubscriptionLongPoll: a receive waiting on an empty subscription
// returns soon after a matching publish, through this server and through
// another one. Both servers poll only every 30 s, so only the wake-up can
// explain a prompt return.
func TestSubscriptionLongPoll(t *testing.T) {
	t.Parallel()
	_, envs := pollingServers(t, "ferry-a", "ferry-b")
	a, b := envs[0], envs[1]
	putTopic(t, a, "lp", map[string]any{"partitions": 2}, http.StatusCreated)
	putSub(t, a, "lp", "s", map[string]any{"filter": map[string]any{"types": []string{"wake"}}}, http.StatusCreated)

	for round, publisher := range []*ferrytest.Env{a, b} {
		done := parked(t, fmt.Sprintf("round %d", round), a, func() asyncResult {
			return doAsync(a, "POST", spath("lp", "s", "/receive"), map[string]any{"wait_seconds": 5, "max_messages": 10})
		})
		// An event the filter drops neither answers nor ends the wait.
		publishEvents(t, publisher, "lp", evt("other"))
		sent := publishEvents(t, publisher, "lp", evt("wake", "id", fmt.Sprintf("wake-%d", round)))
		sentAt := time.Now()
		res := <-done
		requireOK(t, res)
		got := decodeSubMessages(t, res.body)
		require.Equal(t, []string{sent[0].ID}, subIDs(got), "round %d", round)
		require.Less(t, res.took, 2500*time.Millisecond, "round %d: woken, not timed out", round)
		require.Less(t, time.Since(sentAt), 1500*time.Millisecond, "round %d", round)
		require.Equal(t, []string{"ok"}, ackSub(t, a, "lp", "s", got[0].Receipt))
	}

	// Nothing comes: empty after the whole wait.
	res := doAsync(a, "POST", spath("lp", "s", "/receive"), map[string]any{"wait_seconds": 1})
	requireOK(t, res)
	require.Empty(t, decodeSubMessages(t, res.body))
	require.GreaterOrEqual(t, res.took, 900*time.Millisecond)

	// A long poll on a subscription that does not exist is a 404 at once.
	res = doAsync(a, "POST", spath("lp", "ghost", "/receive"), map[string]any{"wait_seconds": 5})
	requireStatus(t, res, http.StatusNotFound)
	require.Less(t, res.took, 2500*time.Millisecond)
}

// TestSubscriptionSpecSchemas holds the subscription schemas of the spec to
// API.md: filter rules, start positions, nullable filter.
func TestSubscriptionSpecSchemas(t *testing.T) {
	t.Parallel()
	doc, err := openapi.Load()
	require.NoError(t, err)
	event := `{"id": "evt-771", "type": "order.created", "key": null, "data": null, "attributes": {}, "partition": 0, "offset": 3, "published_at": "2025-06-01T10:00:00.123456Z", "source": "/ferry/topics/orders", "time": "2025-06-01T10:00:00.123456Z", "datacontenttype": "application/json", "extensions": {}}`
	stats := `{"available": 0, "in_flight": 0, "delayed": 0, "dead_letters": 0, "oldest_age_seconds": 0}`
	sub := `{"name": "billing", "topic": "orders", "filter": FILTER, "ordered": false, "visibility_timeout_seconds": 30, "max_receives": 5, "retention_seconds": 604800, "retry_min_seconds": 1, "retry_max_seconds": 300, "dead_letter_queue": null, "push": null, "created_at": "2025-06-01T10:00:00Z", "updated_at": "2025-06-01T10:00:00Z", "stats": ` + stats + `}`
	tests := []struct {
		schema, body string
		asRequest    bool
		ok           bool
	}{
		{"SubscriptionRequest", `{}`, true, true},
		{"SubscriptionRequest", `{"filter": null}`, true, true},
		{"SubscriptionRequest", `{"filter": {"types": ["order.*"], "attributes": {"region": ["eu", "us"]}, "data": {"customer.tier": ["gold", 1, true, null]}}, "ordered": true, "start": "latest", "visibility_timeout_seconds": 30, "max_receives": 5, "retention_seconds": 604800, "retry_min_seconds": 1, "retry_max_seconds": 300}`, true, true},
		{"SubscriptionRequest", `{"start": "earliest"}`, true, true},
		{"SubscriptionRequest", `{"start": "2025-06-01T10:00:00Z"}`, true, true},
		{"SubscriptionRequest", `{"start": "yesterday"}`, true, false},
		{"SubscriptionRequest", `{"retention_seconds": 59}`, true, false},
		{"SubscriptionRequest", `{"retention_seconds": 1209601}`, true, false},
		{"SubscriptionRequest", `{"delay_seconds": 1}`, true, false},
		{"SubscriptionRequest", `{"filter": {"type": ["a"]}}`, true, false},
		{"SubscriptionRequest", `{"filter": {"types": []}}`, true, false},
		{"SubscriptionRequest", `{"filter": {"types": [""]}}`, true, false},
		{"SubscriptionRequest", `{"filter": {"attributes": {"region": []}}}`, true, false},
		{"SubscriptionRequest", `{"filter": {"attributes": {"region": [1]}}}`, true, false},
		{"SubscriptionRequest", `{"filter": {"data": {"a": [{}]}}}`, true, false},
		{"SubscriptionRequest", `{"filter": {"data": {"a": [[1]]}}}`, true, false},
		{"SeekRequest", `{"to": "earliest"}`, true, true},
		{"SeekRequest", `{"to": "2025-06-01T10:00:00+02:00"}`, true, true},
		{"SeekRequest", `{}`, true, false},
		{"SeekRequest", `{"to": "now"}`, true, false},
		{"Subscription", strings.Replace(sub, "FILTER", "null", 1), false, true},
		{"Subscription", strings.Replace(sub, "FILTER", `{"types": ["#.created"], "data": {"n": [1.5, null]}}`, 1), false, true},
		{"Subscription", strings.Replace(strings.Replace(sub, "FILTER", "null", 1), `"topic": "orders", `, "", 1), false, false},
		{"Subscription", strings.Replace(strings.Replace(sub, "FILTER", "null", 1), `"push": null, `, "", 1), false, false},
		{"Subscription", strings.Replace(strings.Replace(sub, "FILTER", "null", 1), `"push": null`, `"push": {"url": "https://example.com/h", "timeout_seconds": 10, "max_in_flight": 10, "rate_limit_per_second": 0, "format": "standard", "failing_since": null, "disabled_at": null, "disabled_reason": null}, "signing_secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"`, 1), false, true},
		{"Subscription", strings.Replace(strings.Replace(sub, "FILTER", "null", 1), `"push": null`, `"push": {"url": "https://example.com/h"}`, 1), false, false},
		{"SubscriptionRequest", `{"push": {"url": "https://example.com/h", "max_in_flight": 5}}`, true, true},
		{"SubscriptionRequest", `{"push": null}`, true, true},
		{"SubscriptionRequest", `{"push": {"url": "https://example.com/h", "timeout_seconds": 61}}`, true, false},
		{"SubscriptionReceiveResponse", `{"messages": []}`, false, true},
		{"SubscriptionReceiveResponse", `{"messages": [{"id": "evt-771", "event": ` + event + `, "receipt": "r", "receive_count": 1}]}`, false, true},
		{"SubscriptionReceiveResponse", `{"messages": [{"id": "evt-771", "event": ` + event + `, "receipt": "r", "receive_count": 1, "body": 1}]}`, false, false},
		{"SubscriptionReceiveResponse", `{"messages": [{"id": "evt-771", "receipt": "r", "receive_count": 1}]}`, false, false},
		{"SubscriptionDeadLetterPage", `{"messages": [{"id": "evt-771", "event": ` + event + `, "receive_count": 5, "last_error": null, "dead_lettered_at": "2025-06-01T10:00:00Z"}], "next": null}`, false, true},
		{"SubscriptionDeadLetterPage", `{"messages": [{"id": "evt-771", "event": ` + event + `, "receive_count": 5, "dead_lettered_at": "2025-06-01T10:00:00Z"}], "next": null}`, false, false},
	}
	for _, tt := range tests {
		openapitest.CheckSchema(t, doc, tt.schema, tt.body, tt.asRequest, tt.ok)
	}
}

// TestSubscriptionRepublishedEventID: an event id may be published again
// once its dedup window is over (here the window is 0: dedup is off), as a
// new event. That must not fail while a subscription still holds a pending
// delivery of the earlier event with that id, and the new event must reach
// the subscription too.
func TestSubscriptionRepublishedEventID(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "again", map[string]any{"partitions": 1, "dedup_window_seconds": 0}, http.StatusCreated)
	putSub(t, env, "again", "s", nil, http.StatusCreated)
	publishEvents(t, env, "again", evt("t", "id", "X", "data", 1))
	first := receiveAll(t, env, "again", "s")
	require.Len(t, first, 1)
	require.EqualValues(t, 0, first[0].Event.Offset)

	// The first delivery is still pending (in flight).
	r := env.Do("POST", tpath("again", "/events"), map[string]any{"events": []any{evt("t", "id", "X", "data", 2)}})
	require.Equal(t, http.StatusCreated, r.Status, "publishing the id again with dedup off: %s", r.Body)
	page := readEvents(t, env, "again", "?partition=0")
	require.Equal(t, []int64{0, 1}, pageOffsets(page), "both events are in the log")

	require.Equal(t, []string{"ok"}, ackSub(t, env, "again", "s", first[0].Receipt))
	second := receiveAll(t, env, "again", "s")
	require.Len(t, second, 1, "the second event is delivered to the subscription")
	require.Equal(t, "X", second[0].ID)
	require.EqualValues(t, 1, second[0].Event.Offset)
	require.JSONEq(t, `2`, string(second[0].Event.Data))
}

// TestSubscriptionDataPathIndexes: a data filter selects the same events
// whether a publish matches it (in Go) or a backfill or seek does (in
// SQL), also for array index segments that are not plain non-negative
// decimals ("-1", "01", "+1").
func TestSubscriptionDataPathIndexes(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "idx", map[string]any{"partitions": 1}, http.StatusCreated)
	// Index spellings PostgreSQL's #> reads differently from the publish's
	// matcher are refused; a plain index selects the same events live and
	// on backfill.
	for _, p := range []string{"items.-1.sku", "items.01.sku", "items.+1.sku", "items. 1.sku"} {
		r := env.Do("PUT", spath("idx", "bad"), map[string]any{"filter": map[string]any{"data": map[string]any{p: []any{"x"}}}})
		requireProblem(t, r, http.StatusBadRequest, "invalid_request")
	}
	p := "items.1.sku"
	putSub(t, env, "idx", "live", map[string]any{"filter": map[string]any{"data": map[string]any{p: []any{"x"}}}}, http.StatusCreated)
	publishEvents(t, env, "idx",
		evt("t", "id", "e1", "data", map[string]any{"items": []any{map[string]any{"sku": "a"}, map[string]any{"sku": "x"}}}),
		evt("t", "id", "e2", "data", map[string]any{"items": []any{map[string]any{"sku": "x"}}}))
	putSub(t, env, "idx", "backfill", map[string]any{"start": "earliest", "filter": map[string]any{"data": map[string]any{p: []any{"x"}}}}, http.StatusCreated)
	live := subIDs(receiveAll(t, env, "idx", "live"))
	backfilled := subIDs(receiveAll(t, env, "idx", "backfill"))
	require.Equal(t, []string{"e1"}, live)
	require.Equal(t, live, backfilled)
}

// TestSubscriptionFilterValuesRefusedByPostgres: filter values that
// PostgreSQL's jsonb cannot hold are a 400 (as in published event data),
// never a 500.
func TestSubscriptionFilterValuesRefusedByPostgres(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "nul", map[string]any{"partitions": 1}, http.StatusCreated)
	for _, body := range []string{
		`{"filter":{"attributes":{"region":["e\u0000u"]}}}`,
		`{"filter":{"data":{"tier":["go\u0000ld"]}}}`,
		`{"filter":{"data":{"n":[1e1000000]}}}`,
	} {
		r := env.Do("PUT", spath("nul", "s"), body)
		require.Equal(t, http.StatusBadRequest, r.Status, "PUT %s: %s", body, r.Body)
		requireProblem(t, r, http.StatusBadRequest, "invalid_request")
	}
	require.Empty(t, listSubs(t, env, "nul"))
}
