package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/push"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// cloudFixture publishes to topic t (1 partition) three events: a
// binary-mode CloudEvent with text data that looks like JSON, a
// structured one with JSON data and extensions, and a plain JSON event
// with a key. It returns the binary event's body.
func cloudFixture(t *testing.T, env *ferrytest.Env) []byte {
	t.Helper()
	text := []byte(`{"not": "json data"} ` + "é")
	publishedOf(t, publishCloud(t, env, "t", text, http.Header{
		"Ce-Specversion": {"1.0"}, "Ce-Id": {"c-bin"}, "Ce-Source": {"https://src.example/a%20b"}, "Ce-Type": {"x.bin"},
		"Ce-Subject": {"orders/1"}, "Ce-Comexampleext": {"caf%C3%A9"}, "Content-Type": {"text/plain"},
	}))
	publishedOf(t, publishCloud(t, env, "t", []byte(`{"specversion": "1.0", "id": "c-json", "source": "urn:shop",
		"type": "x.json", "time": "2026-03-04T05:06:07Z", "dataschema": "https://s.example/x", "num": 7, "flag": false,
		"datacontenttype": "application/json", "data": {"a": [1, 2]}}`), http.Header{"Content-Type": {ctStructured}}))
	publishEvents(t, env, "t", evt("x.plain", "id", "c-plain", "key", "K1", "data", map[string]any{"p": true}))
	return text
}

func TestCloudEventsPushFormats(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	recv := map[string]*receiver{}
	secrets := map[string]string{}
	putTopic(t, env, "t", map[string]any{"partitions": 1}, http.StatusCreated)
	for _, f := range []string{"standard", "cloudevents", "cloudevents-binary"} {
		recv[f] = newReceiver(t, failFirst(1, http.StatusInternalServerError))
		secrets[f] = newPushSub(t, env, "t", f, fast(map[string]any{"push": map[string]any{"url": recv[f].url(), "format": f}}))
		p, _ := subPush(t, env, "t", f)
		require.Equal(t, f, p.Format)
	}
	text := cloudFixture(t, env)

	// Every format retries a failed attempt with the same id and the same
	// body, signed each time.
	for f, rc := range recv {
		reqs := rc.wait(t, 4)
		retried := 0
		for _, h := range reqs[1:] {
			if h.id() == reqs[0].id() {
				require.Equal(t, reqs[0].body, h.body, "%s: the retry sends the same body", f)
				retried++
			}
		}
		require.Equal(t, 1, retried, "%s: the failed attempt is retried with the same webhook-id", f)
		for _, h := range reqs {
			require.NoError(t, push.Verify(secrets[f], h.header, h.body, time.Now(), 0), "%s: signed", f)
		}
		waitDrained(t, env, "t", f)
	}
	byID := func(f string) map[string]hookRequest {
		out := map[string]hookRequest{}
		for _, h := range recv[f].requests() {
			out[h.id()] = h
		}
		require.Len(t, out, 3, "%s: every event pushed", f)
		return out
	}

	st := byID("cloudevents")
	for _, h := range st {
		require.Equal(t, "application/cloudevents+json", h.header.Get("Content-Type"))
	}
	var bin map[string]any
	require.NoError(t, json.Unmarshal(st["c-bin"].body, &bin))
	require.Equal(t, map[string]any{"specversion": "1.0", "id": "c-bin", "source": "https://src.example/a b", "type": "x.bin",
		"subject": "orders/1", "comexampleext": "café", "datacontenttype": "text/plain",
		"data_base64": "eyJub3QiOiAianNvbiBkYXRhIn0gw6k="}, bin)
	var js map[string]any
	require.NoError(t, json.Unmarshal(st["c-json"].body, &js))
	require.Equal(t, map[string]any{"specversion": "1.0", "id": "c-json", "source": "urn:shop", "type": "x.json",
		"time": "2026-03-04T05:06:07Z", "dataschema": "https://s.example/x", "num": 7.0, "flag": false,
		"datacontenttype": "application/json", "data": map[string]any{"a": []any{1.0, 2.0}}}, js)
	var plain map[string]any
	require.NoError(t, json.Unmarshal(st["c-plain"].body, &plain))
	require.Equal(t, "/ferry/topics/t", plain["source"], "a plain event's default source")
	require.Equal(t, "application/json", plain["datacontenttype"])
	require.Equal(t, "K1", plain["partitionkey"], "its key as partitionkey")
	require.NotEmpty(t, plain["time"])

	bh := byID("cloudevents-binary")
	h := bh["c-bin"]
	require.Equal(t, text, h.body, "binary data byte for byte")
	require.Equal(t, "text/plain", h.header.Get("Content-Type"))
	require.Equal(t, "1.0", h.header.Get("ce-specversion"))
	require.Equal(t, "https://src.example/a%20b", h.header.Get("ce-source"), "percent-encoded")
	require.Equal(t, "caf%C3%A9", h.header.Get("ce-comexampleext"))
	require.Equal(t, "orders/1", h.header.Get("ce-subject"))
	h = bh["c-json"]
	require.JSONEq(t, `{"a": [1, 2]}`, string(h.body))
	require.Equal(t, "7", h.header.Get("ce-num"))
	require.Equal(t, "false", h.header.Get("ce-flag"))
	require.Equal(t, "2026-03-04T05:06:07Z", h.header.Get("ce-time"))
	h = bh["c-plain"]
	require.Equal(t, "K1", h.header.Get("ce-partitionkey"))
	require.Equal(t, "application/json", h.header.Get("Content-Type"))

	std := byID("standard")
	require.Equal(t, "application/json", std["c-bin"].header.Get("Content-Type"))
	var ev cloudEventJSON
	require.NoError(t, json.Unmarshal(std["c-bin"].body, &ev))
	require.Equal(t, "https://src.example/a b", ev.Source, "the standard body carries the CloudEvents attributes")
	require.Equal(t, "eyJub3QiOiAianNvbiBkYXRhIn0gw6k=", *ev.DataBase64)
}

func TestCloudEventsEverywhereAnEventAppears(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "t", map[string]any{"partitions": 1}, http.StatusCreated)
	putSub(t, env, "t", "s", map[string]any{"start": "latest"}, http.StatusCreated)
	cloudFixture(t, env)

	// Subscription messages.
	r := env.Do("POST", spath("t", "s", "/receive"), map[string]any{"max_messages": 10})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var msgs struct {
		Messages []struct {
			Event cloudEventJSON `json:"event"`
		} `json:"messages"`
	}
	r.JSON(t, &msgs)
	require.Len(t, msgs.Messages, 3)
	got := map[string]cloudEventJSON{}
	for _, m := range msgs.Messages {
		got[m.Event.ID] = m.Event
	}
	require.Equal(t, "orders/1", *got["c-bin"].Subject)
	require.Equal(t, `"café"`, string(got["c-bin"].Extensions["comexampleext"]))
	require.Equal(t, "/ferry/topics/t", got["c-plain"].Source)

	// Group polls.
	r = env.Do("POST", tpath("t", "/groups/g/poll"), map[string]any{"consumer": "a", "start": "earliest"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var poll struct {
		Events []cloudEventJSON `json:"events"`
	}
	r.JSON(t, &poll)
	require.Len(t, poll.Events, 3)
	require.Equal(t, "urn:shop", poll.Events[1].Source)
	require.Equal(t, "2026-03-04T05:06:07Z", *poll.Events[1].Time)

	// The SQL API's ferry.receive: the body is the event with them.
	conn := dbConn(t, env.DatabaseURL)
	putSub(t, env, "t", "sql", map[string]any{"start": "earliest"}, http.StatusCreated)
	var body []byte
	eventually(t, "the backfill", func() bool {
		err := conn.QueryRow(context.Background(), `SELECT body::text FROM ferry.receive('t/sql', 1)`).Scan(&body)
		return err == nil
	})
	var first cloudEventJSON
	require.NoError(t, json.Unmarshal(body, &first))
	require.Equal(t, "c-bin", first.ID)
	require.Equal(t, "https://src.example/a b", first.Source, "a backfilled delivery carries them too")
	require.Equal(t, "text/plain", *first.DataContentType)

	// A read as a CloudEvents batch.
	r = env.DoWith("GET", tpath("t", "/events")+"?partition=0&limit=2", nil, http.Header{
		"Authorization": {"Bearer " + ferrytest.AdminKey}, "Accept": {"application/cloudevents-batch+json"}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, "application/cloudevents-batch+json", r.Header.Get("Content-Type"))
	require.Equal(t, "2", r.Header.Get("ferry-next-offset"))
	var batch []map[string]any
	r.JSON(t, &batch)
	require.Len(t, batch, 2)
	require.Equal(t, "c-bin", batch[0]["id"])
	require.Equal(t, "1.0", batch[0]["specversion"])
	require.Equal(t, "eyJub3QiOiAianNvbiBkYXRhIn0gw6k=", batch[0]["data_base64"])
	require.Equal(t, float64(7), batch[1]["num"])
}

func TestCloudEventsFilterSourcesSubjects(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "t", map[string]any{"partitions": 1}, http.StatusCreated)
	filters := map[string]map[string]any{
		"https":   {"sources": []string{"https://*"}},
		"plain":   {"sources": []string{"/ferry/topics/t"}},
		"subject": {"subjects": []string{"orders/*"}},
		"both":    {"sources": []string{"urn:*", "*a b"}, "subjects": []string{"*1"}},
		"literal": {"sources": []string{"urn:sh_p", "urn:%"}},
	}
	for name, f := range filters {
		putSub(t, env, "t", name, map[string]any{"filter": f}, http.StatusCreated)
	}
	cloudFixture(t, env)
	want := map[string][]string{
		"https": {"c-bin"}, "plain": {"c-plain"}, "subject": {"c-bin"}, "both": {"c-bin"}, "literal": nil,
	}
	// The same filters, matched in SQL by a backfill.
	for name, f := range filters {
		putSub(t, env, "t", name+"-bf", map[string]any{"filter": f, "start": "earliest"}, http.StatusCreated)
	}
	for name, ids := range want {
		for _, suffix := range []string{"", "-bf"} {
			var got []string
			eventually(t, "the backfill of "+name+suffix, func() bool {
				got = nil
				r := env.Do("POST", spath("t", name+suffix, "/receive"), map[string]any{"max_messages": 10, "visibility_timeout_seconds": 1})
				var out struct {
					Messages []struct {
						ID string `json:"id"`
					} `json:"messages"`
				}
				r.JSON(t, &out)
				for _, m := range out.Messages {
					got = append(got, m.ID)
				}
				sort.Strings(got)
				return len(got) == len(ids)
			})
			require.Equal(t, ids, got, "filter %s%s (%v)", name, suffix, filters[name])
		}
	}

	for _, bad := range []map[string]any{{"sources": []string{}}, {"subjects": []string{""}}, {"sources": "x"}} {
		r := env.Do("PUT", spath("t", "bad"), map[string]any{"filter": bad})
		requireProblem(t, r, http.StatusBadRequest, "invalid_request")
	}
	r := env.Do("PUT", qpath("q"), map[string]any{"push": map[string]any{"url": "https://hooks.invalid/x", "format": "cloudevents"}})
	p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
	require.Contains(t, p["detail"], "push.format")
}

// TestCloudEventsTopicSource: a topic's source setting is the source of its
// plain JSON events, in reads, deliveries and filters; CloudEvents keep
// their own.
func TestCloudEventsTopicSource(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	r := env.Do("PUT", tpath("t"), map[string]any{"partitions": 1})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	require.Equal(t, "/ferry/topics/t", r.Map(t)["source"], "the default")
	requireProblem(t, env.Do("PUT", tpath("t"), map[string]any{"source": ""}), http.StatusBadRequest, "invalid_request")
	r = env.Do("PUT", tpath("t"), map[string]any{"source": "https://shop.invalid/orders"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, "https://shop.invalid/orders", r.Map(t)["source"])
	putSub(t, env, "t", "shop", map[string]any{"filter": map[string]any{"sources": []string{"https://shop.invalid/*"}}}, http.StatusCreated)

	publishEvents(t, env, "t", evt("plain", "id", "p1"))
	publishedOf(t, publishCloud(t, env, "t", []byte(`{"specversion": "1.0", "id": "c1", "source": "/own", "type": "t"}`),
		http.Header{"Content-Type": {ctStructured}}))
	evs := readCloud(t, env, "t", "?partition=0")
	require.Equal(t, "https://shop.invalid/orders", evs[0].Source)
	require.Equal(t, "/own", evs[1].Source)
	r = env.Do("POST", spath("t", "shop", "/receive"), map[string]any{"max_messages": 10})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var msgs struct {
		Messages []struct {
			Event cloudEventJSON `json:"event"`
		} `json:"messages"`
	}
	r.JSON(t, &msgs)
	require.Len(t, msgs.Messages, 1)
	require.Equal(t, "p1", msgs.Messages[0].Event.ID, "the filter matched the topic's source")
	require.Equal(t, "https://shop.invalid/orders", msgs.Messages[0].Event.Source, "the delivery carries it")
}

// TestCloudEventsPushOrderedAndDeadLettered: a CloudEvents format changes
// only the body. An ordered push subscription in each CloudEvents format
// delivers a key's events one at a time in offset order, retries a
// refused event up to max_receives with the same webhook-id, dead-letters
// it (its dead letter carrying the CloudEvents attributes), and only then
// delivers the key's next event.
func TestCloudEventsPushOrderedAndDeadLettered(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	putTopic(t, env, "ord", map[string]any{"partitions": 1}, http.StatusCreated)
	recv := map[string]*receiver{}
	for _, f := range []string{"cloudevents", "cloudevents-binary"} {
		recv[f] = newReceiver(t, func(w http.ResponseWriter, _ *http.Request, h hookRequest) {
			if h.id() == "poison" {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		newPushSub(t, env, "ord", f, fast(map[string]any{"ordered": true, "max_receives": 2,
			"push": map[string]any{"url": recv[f].url(), "format": f}}))
	}
	publishEvents(t, env, "ord", evt("x", "id", "first", "key", "k"), evt("x", "id", "poison", "key", "k"), evt("x", "id", "last", "key", "k"))
	for f, rc := range recv {
		rc.wait(t, 4)
		waitDrained(t, env, "ord", f)
		var ids []string
		for _, h := range rc.requests() {
			ids = append(ids, h.id())
		}
		require.Equal(t, []string{"first", "poison", "poison", "last"}, ids, "%s: in order, the refused event retried, then dead-lettered", f)
		var dl struct {
			Messages []struct {
				Event cloudEventJSON `json:"event"`
			} `json:"messages"`
		}
		r := env.Do("GET", spath("ord", f, "/dead-letters"), nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		r.JSON(t, &dl)
		require.Len(t, dl.Messages, 1, f)
		require.Equal(t, "/ferry/topics/ord", dl.Messages[0].Event.Source, f)
	}
}
