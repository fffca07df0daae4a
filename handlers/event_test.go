package handlers_test

import (
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
)

func TestPublishAndRead(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "orders", nil, http.StatusCreated)
	before := time.Now()

	res := publishEvents(t, env, "orders",
		evt("order.created", "id", "evt-771", "key", "ORD-9912", "data", map[string]any{"customer_id": "cust-456"}, "attributes", map[string]any{"region": "eu"}),
		evt("ping", "key", keyFor(t, 1, 4)),
		evt("order.created", "id", "evt-771", "key", "a"), // a duplicate, whose key would go elsewhere
		evt("order.paid", "id", "evt-772", "key", "a", "data", []any{1, "two", nil}),
		evt("order.paid", "id", "evt-773", "key", "ORD-9912", "data", "text"),
	)
	require.Equal(t, client.Published{ID: "evt-771", Partition: 2, Offset: 0}, res[0], "fnv1a32(ORD-9912) mod 4 = 2")
	require.NotEmpty(t, res[1].ID, "a generated id")
	require.Equal(t, client.Published{ID: res[1].ID, Partition: 1, Offset: 0}, res[1])
	require.Equal(t, client.Published{ID: "evt-771", Partition: 2, Offset: 0, Duplicate: true}, res[2])
	require.Equal(t, client.Published{ID: "evt-772", Partition: 0, Offset: 0}, res[3], "fnv1a32(a) mod 4 = 0")
	require.Equal(t, client.Published{ID: "evt-773", Partition: 2, Offset: 1}, res[4])
	// A keyless event, alone.
	keyless := publishEvents(t, env, "orders", evt("ping"))[0]
	require.NotEmpty(t, keyless.ID)
	require.False(t, keyless.Duplicate)
	res = append(res, keyless)

	// A duplicate in a later request answers the original.
	dup := publishEvents(t, env, "orders", evt("x", "id", "evt-771"))
	require.Equal(t, client.Published{ID: "evt-771", Partition: 2, Offset: 0, Duplicate: true}, dup[0])

	page := readEvents(t, env, "orders", "?partition=2&limit=2")
	require.Equal(t, []int64{0, 1}, pageOffsets(page))
	require.EqualValues(t, 2, page.NextOffset)
	first := page.Events[0]
	require.Equal(t, "evt-771", first.ID)
	require.Equal(t, "order.created", first.Type)
	require.Equal(t, "ORD-9912", *first.Key)
	require.JSONEq(t, `{"customer_id":"cust-456"}`, string(first.Data))
	require.Equal(t, map[string]string{"region": "eu"}, first.Attributes)
	require.Equal(t, 2, first.Partition)
	require.WithinDuration(t, before, first.PublishedAt, time.Minute)
	require.JSONEq(t, `"text"`, string(page.Events[1].Data))
	require.Equal(t, map[string]string{}, page.Events[1].Attributes, "no attributes read back as {}")

	page = readEvents(t, env, "orders", "?partition=0&limit=1")
	require.Equal(t, []int64{0}, pageOffsets(page))
	require.JSONEq(t, `[1,"two",null]`, string(page.Events[0].Data))

	// The keyless ping: data null, key null, attributes {}.
	r := env.Do("GET", tpath("orders", "/events")+fmt.Sprintf("?partition=%d&from_offset=%d", keyless.Partition, keyless.Offset), nil)
	require.Equal(t, http.StatusOK, r.Status)
	var raw struct {
		Events []map[string]json.RawMessage `json:"events"`
	}
	r.JSON(t, &raw)
	require.Equal(t, keyless.ID, strings.Trim(string(raw.Events[0]["id"]), `"`))
	require.Equal(t, "null", string(raw.Events[0]["key"]))
	require.Equal(t, "null", string(raw.Events[0]["data"]))
	require.Equal(t, "{}", string(raw.Events[0]["attributes"]))

	// GET shows the heads: the highest offset answered per partition.
	heads := []int64{-1, -1, -1, -1}
	for _, r := range res {
		heads[r.Partition] = max(heads[r.Partition], r.Offset)
	}
	for i, o := range getTopic(t, env, "orders").Offsets {
		require.Equal(t, client.PartitionOffsets{Partition: i, HeadOffset: heads[i], OldestOffset: 0}, o)
	}

	// Empty reads: next_offset is the position asked for.
	for _, q := range []string{
		fmt.Sprintf("?partition=2&from_offset=%d", heads[2]+1),
		"?partition=2&from_offset=50",
		fmt.Sprintf("?partition=3&from_offset=%d&wait_seconds=0", heads[3]+1),
	} {
		page := readEvents(t, env, "orders", q)
		require.Empty(t, page.Events, q)
		from, _ := url.ParseQuery(strings.TrimPrefix(q, "?"))
		require.Equal(t, from.Get("from_offset"), fmt.Sprint(page.NextOffset), q)
	}
}

func TestReadPaging(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "log", map[string]any{"partitions": 1}, http.StatusCreated)
	var batch []map[string]any
	for i := range 25 {
		batch = append(batch, evt("t", "id", fmt.Sprintf("e%d", i), "data", i))
	}
	res := publishEvents(t, env, "log", batch...)
	for i, r := range res {
		require.Equal(t, client.Published{ID: fmt.Sprintf("e%d", i), Partition: 0, Offset: int64(i)}, r)
	}

	// Pages of 10 from next_offset: every event once, in order.
	var got []int64
	next := int64(0)
	for range 10 {
		page := readEvents(t, env, "log", fmt.Sprintf("?partition=0&from_offset=%d&limit=10", next))
		require.LessOrEqual(t, len(page.Events), 10)
		if len(page.Events) == 0 {
			require.Equal(t, next, page.NextOffset)
			break
		}
		for _, e := range page.Events {
			require.JSONEq(t, fmt.Sprint(e.Offset), string(e.Data))
		}
		got = append(got, pageOffsets(page)...)
		require.Equal(t, page.Events[len(page.Events)-1].Offset+1, page.NextOffset)
		next = page.NextOffset
	}
	require.Equal(t, offsetRange(0, 24), got)
	require.EqualValues(t, 25, next)

	// Defaults: partition 0, from_offset 0, limit 100.
	page := readEvents(t, env, "log", "")
	require.Equal(t, offsetRange(0, 24), pageOffsets(page))
	// limit 1 and 1000 are in range.
	require.Equal(t, []int64{7}, pageOffsets(readEvents(t, env, "log", "?from_offset=7&limit=1")))
	require.Len(t, readEvents(t, env, "log", "?limit=1000").Events, 25)

	// from_time: the first event published at or after it (inclusive).
	all := readEvents(t, env, "log", "").Events
	for _, i := range []int{0, 5, 24} {
		ts := all[i].PublishedAt
		want := []int64{}
		for _, e := range all {
			if !e.PublishedAt.Before(ts) {
				want = append(want, e.Offset)
			}
		}
		page := readEvents(t, env, "log", "?from_time="+url.QueryEscape(ts.Format(time.RFC3339Nano)))
		require.Equal(t, want, pageOffsets(page), "from_time of offset %d", i)
		require.EqualValues(t, 25, page.NextOffset)
		require.LessOrEqual(t, page.Events[0].Offset, int64(i), "inclusive")
	}
	// With a time zone offset, and paged.
	ts := all[5].PublishedAt.In(time.FixedZone("", 2*3600))
	page = readEvents(t, env, "log", "?limit=3&from_time="+url.QueryEscape(ts.Format(time.RFC3339Nano)))
	require.Len(t, page.Events, 3)
	require.Equal(t, page.Events[2].Offset+1, page.NextOffset)
	// Long before everything: from 0. After everything: nothing, next_offset head+1.
	page = readEvents(t, env, "log", "?from_time=2000-01-01T00:00:00Z")
	require.Equal(t, offsetRange(0, 24), pageOffsets(page))
	page = readEvents(t, env, "log", "?from_time="+url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
	require.Empty(t, page.Events)
	require.EqualValues(t, 25, page.NextOffset, "head_offset + 1")
}

// TestEventLongPollAcrossInstances: a read waiting on server A returns soon
// after a publish through server B on the same database. Both poll only
// every 30 s, so only the Postgres NOTIFY can explain a prompt return.
func TestEventLongPollAcrossInstances(t *testing.T) {
	t.Parallel()
	_, envs := pollingServers(t, "ferry-a", "ferry-b")
	a, b := envs[0], envs[1]
	putTopic(t, a, "lp", map[string]any{"partitions": 2}, http.StatusCreated)

	next := int64(0)
	for round := range 3 {
		done := parked(t, fmt.Sprintf("round %d", round), a, func() asyncResult {
			return getAsync(a, tpath("lp", "/events")+fmt.Sprintf("?partition=1&from_offset=%d&wait_seconds=10", next))
		})
		// A publish to the other partition does not answer this read.
		start := time.Now()
		publishEvents(t, b, "lp", evt("other", "key", keyFor(t, 0, 2)))
		other := time.Since(start)
		sent := publishEvents(t, b, "lp", evt("wake", "id", fmt.Sprintf("wake-%d", round), "key", keyFor(t, 1, 2)))
		sentAt := time.Now()
		res := <-done
		requireOK(t, res)
		page := decodePage(t, res.body)
		require.Len(t, page.Events, 1, "round %d: the read took %s; the publishes %s and %s; published %+v",
			round, res.took, other, sentAt.Sub(start)-other, sent)
		require.Equal(t, sent[0].ID, page.Events[0].ID)
		require.Equal(t, next, page.Events[0].Offset)
		require.Equal(t, next+1, page.NextOffset)
		require.Less(t, time.Since(sentAt), 1500*time.Millisecond, "round %d: the wake-up must travel through NOTIFY, not a poll", round)
		next = page.NextOffset
	}

	// Nothing comes: empty after the whole wait, next_offset the position.
	res := getAsync(a, tpath("lp", "/events")+fmt.Sprintf("?partition=1&from_offset=%d&wait_seconds=1", next))
	requireOK(t, res)
	page := decodePage(t, res.body)
	require.Empty(t, page.Events)
	require.Equal(t, next, page.NextOffset)
	require.GreaterOrEqual(t, res.took, 900*time.Millisecond)
}

// The body limit: data of exactly the limit is accepted, one byte more is
// a 413 (as compact JSON, like message bodies).
func TestEventDataLimit(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, withLimits(1024, 0))
	putTopic(t, env, "big", map[string]any{"partitions": 1}, http.StatusCreated)
	exact := strings.Repeat("x", 1024-2) // with its quotes, 1024 bytes
	publishEvents(t, env, "big", evt("t", "data", exact))
	// Whitespace outside strings does not count.
	r := env.Do("POST", tpath("big", "/events"), `{"events":[{"type":"t","data":   "`+exact+`"   }]}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r = env.Do("POST", tpath("big", "/events"), map[string]any{"events": []any{evt("t", "data", exact+"y")}})
	requireProblem(t, r, http.StatusRequestEntityTooLarge, "payload_too_large")
	require.EqualValues(t, 1, getTopic(t, env, "big").Offsets[0].HeadOffset)
}

// A publish with a Content-Type other than JSON is refused.
func TestPublishContentType(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "ct", nil, http.StatusCreated)
	r := env.DoWith("POST", tpath("ct", "/events"), `{"events":[{"type":"t"}]}`,
		http.Header{"Authorization": {"Bearer " + ferrytest.AdminKey}, "Content-Type": {"text/plain"}})
	requireProblem(t, r, http.StatusUnsupportedMediaType, "unsupported_media_type")
	for _, o := range getTopic(t, env, "ct").Offsets {
		require.EqualValues(t, -1, o.HeadOffset)
	}
}

// Data PostgreSQL's jsonb cannot hold is a 400 that writes nothing, never a
// 500 (the reviewer's cases).
func TestPublishDataJSONBRefuses(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	require.Equal(t, http.StatusCreated, env.Do("PUT", "/v1/topics/jb", map[string]int{"partitions": 1}).Status)
	for _, data := range []string{`{"a":1e1000000}`, `{"a":1e-1000000}`, `"\ud800"`, `{"x":"\u0000"}`} {
		r := env.Do("POST", "/v1/topics/jb/events", `{"events":[{"type":"t","data":`+data+`}]}`)
		require.Equal(t, http.StatusBadRequest, r.Status, "data %s: %s", data, r.Body)
		require.Contains(t, string(r.Body), "invalid_request")
	}
	r := env.Do("POST", "/v1/topics/jb/events", `{"events":[{"type":"t","data":{"a":1e400,"s":"\ud83d\ude00"}}]}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var page struct {
		Events []struct{ Offset int64 } `json:"events"`
	}
	env.Do("GET", "/v1/topics/jb/events", nil).JSON(t, &page)
	require.Len(t, page.Events, 1, "only the valid publish wrote")
	require.EqualValues(t, 0, page.Events[0].Offset)
}
