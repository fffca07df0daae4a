package handlers_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// cloudEventJSON is an event as reads answer it, with its CloudEvents
// attributes.
type cloudEventJSON struct {
	client.Event
	Source          string                     `json:"source"`
	Subject         *string                    `json:"subject"`
	Time            *string                    `json:"time"`
	DataContentType *string                    `json:"datacontenttype"`
	DataSchema      *string                    `json:"dataschema"`
	Extensions      map[string]json.RawMessage `json:"extensions"`
	DataBase64      *string                    `json:"data_base64"`
}

const (
	ctStructured = "application/cloudevents+json"
	ctBatch      = "application/cloudevents-batch+json"
)

// publishCloud POSTs a CloudEvents publish (body as is, headers as given,
// with the admin key) and returns the answer.
func publishCloud(t testing.TB, env *ferrytest.Env, topic string, body []byte, header http.Header) ferrytest.Response {
	t.Helper()
	h := header.Clone()
	h.Set("Authorization", "Bearer "+ferrytest.AdminKey)
	return env.DoWith("POST", tpath(topic, "/events"), body, h)
}

func publishedOf(t testing.TB, r ferrytest.Response) []client.Published {
	t.Helper()
	require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Body)
	var out struct {
		Events []client.Published `json:"events"`
	}
	r.JSON(t, &out)
	return out.Events
}

// readCloud reads one partition's events with their CloudEvents attributes.
func readCloud(t testing.TB, env *ferrytest.Env, topic, query string) []cloudEventJSON {
	t.Helper()
	r := env.Do("GET", tpath(topic, "/events")+query, nil)
	require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
	var page struct {
		Events []cloudEventJSON `json:"events"`
	}
	r.JSON(t, &page)
	return page.Events
}

func ptr[T any](v T) *T { return &v }

func TestCloudEventsStructuredKeepsEveryAttribute(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "orders", map[string]any{"partitions": 4}, http.StatusCreated)
	body := `{"specversion": "1.0", "id": "ce-1", "source": "https://shop.example/orders", "type": "order.created",
		"subject": "ORD-9912", "time": "2026-01-02T03:04:05.123+01:00", "datacontenttype": "application/json",
		"dataschema": "https://shop.example/schemas/order.json", "partitionkey": "ORD-9912",
		"comexampleext": "v", "num": 42.50, "flag": true, "nothing": null,
		"key": "an extension named like a Ferry field", "partition": 3,
		"data": {"customer_id": "cust-456"}}`
	res := publishedOf(t, publishCloud(t, env, "orders", []byte(body), http.Header{"Content-Type": {ctStructured}}))
	require.Equal(t, []client.Published{{ID: "ce-1", Partition: 2, Offset: 0}}, res, "partitionkey picks the partition: fnv1a32(ORD-9912) mod 4 = 2")

	dup := publishedOf(t, publishCloud(t, env, "orders", []byte(body), http.Header{"Content-Type": {ctStructured + "; charset=utf-8"}}))
	require.Equal(t, []client.Published{{ID: "ce-1", Partition: 2, Offset: 0, Duplicate: true}}, dup, "id is the dedup key")

	evs := readCloud(t, env, "orders", "?partition=2")
	require.Len(t, evs, 1)
	e := evs[0]
	require.Equal(t, "ce-1", e.ID)
	require.Equal(t, "order.created", e.Type)
	require.Equal(t, "ORD-9912", *e.Key)
	require.Equal(t, "https://shop.example/orders", e.Source)
	require.Equal(t, "ORD-9912", *e.Subject)
	require.Equal(t, "2026-01-02T03:04:05.123+01:00", *e.Time, "time kept exactly as given")
	require.Equal(t, "application/json", *e.DataContentType)
	require.Equal(t, "https://shop.example/schemas/order.json", *e.DataSchema)
	require.JSONEq(t, `{"customer_id": "cust-456"}`, string(e.Data))
	require.Nil(t, e.DataBase64)
	require.Equal(t, map[string]string{}, e.Attributes, "extensions are not Ferry attributes")
	exts := map[string]string{}
	for k, v := range e.Extensions {
		exts[k] = string(v)
	}
	require.Equal(t, map[string]string{"partitionkey": `"ORD-9912"`, "comexampleext": `"v"`, "num": "42.50", "flag": "true",
		"key": `"an extension named like a Ferry field"`, "partition": "3"}, exts,
		"every extension kept exactly (number text included); a null one is absent")
	require.Equal(t, 2, e.Partition, "the extension named partition does not move the event")
}

func TestCloudEventsBatchIsAllOrNothing(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "b", map[string]any{"partitions": 1}, http.StatusCreated)
	ev := func(id string, more string) string {
		return `{"specversion": "1.0", "id": "` + id + `", "source": "/s", "type": "t"` + more + `}`
	}
	bad := `[` + ev("a", "") + `,{"specversion": "1.0", "id": "b", "type": "t"}]`
	r := publishCloud(t, env, "b", []byte(bad), http.Header{"Content-Type": {ctBatch}})
	p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
	require.Contains(t, p["detail"], "[1].source")
	require.Empty(t, readCloud(t, env, "b", "?partition=0"), "a refused batch writes nothing")

	for _, empty := range []string{`[]`, `null`} {
		requireProblem(t, publishCloud(t, env, "b", []byte(empty), http.Header{"Content-Type": {ctBatch}}), http.StatusBadRequest, "invalid_request")
	}

	good := `[` + ev("a", `, "data_base64": "AAEC/w=="`) + `,` + ev("b", `, "data": "text"`) + `,` + ev("a", "") + `]`
	res := publishedOf(t, publishCloud(t, env, "b", []byte(good), http.Header{"Content-Type": {ctBatch}}))
	require.Equal(t, []client.Published{{ID: "a", Offset: 0}, {ID: "b", Offset: 1}, {ID: "a", Offset: 0, Duplicate: true}}, res)
	evs := readCloud(t, env, "b", "?partition=0")
	require.Len(t, evs, 2)
	require.Equal(t, "AAEC/w==", *evs[0].DataBase64, "data_base64 kept byte for byte")
	require.JSONEq(t, "null", string(evs[0].Data))
	require.JSONEq(t, `"text"`, string(evs[1].Data))
	require.Nil(t, evs[1].DataContentType, "a CloudEvent without datacontenttype is given none")
	require.Nil(t, evs[1].Time, "nor a time")
}

func TestCloudEventsBinaryMode(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "bin", map[string]any{"partitions": 1}, http.StatusCreated)
	header := http.Header{
		"Ce-Specversion":  {"1.0"},
		"Ce-Id":           {"bin-1"},
		"Ce-Source":       {"%2Fsensors%2Froom%20a"},
		"Ce-Type":         {"reading"},
		"Ce-Subject":      {"caf%C3%A9 %22quoted%22"},
		"Ce-Time":         {"2026-01-02T03:04:05Z"},
		"Ce-Partitionkey": {"k1"},
		"Ce-Offset":       {"an extension named like a Ferry field"},
		"Content-Type":    {"text/plain; charset=utf-8"},
	}
	body := []byte(`{"looks": "like JSON", "but": "is text"}` + "\n")
	res := publishedOf(t, publishCloud(t, env, "bin", body, header))
	require.Equal(t, "bin-1", res[0].ID)

	header = header.Clone()
	header.Set("Ce-Id", "bin-2")
	header.Set("Content-Type", "application/json")
	header.Del("Ce-Subject")
	publishedOf(t, publishCloud(t, env, "bin", []byte(` {"n": 1} `), header))

	evs := readCloud(t, env, "bin", "?partition=0")
	require.Len(t, evs, 2)
	e := evs[0]
	require.Equal(t, "/sensors/room a", e.Source, "percent-decoded")
	require.Equal(t, `café "quoted"`, *e.Subject)
	require.Equal(t, "text/plain; charset=utf-8", *e.DataContentType, "the Content-Type is the datacontenttype")
	require.Equal(t, "k1", *e.Key)
	require.JSONEq(t, "null", string(e.Data), "JSON text with a non-JSON content type is not JSON data")
	got, err := base64.StdEncoding.DecodeString(*e.DataBase64)
	require.NoError(t, err)
	require.Equal(t, body, got, "byte for byte")
	require.Equal(t, `"an extension named like a Ferry field"`, string(e.Extensions["offset"]))
	require.Equal(t, int64(0), e.Offset)
	require.JSONEq(t, `{"n": 1}`, string(evs[1].Data), "a JSON content type makes JSON data")
	require.Nil(t, evs[1].DataBase64)
}

func TestCloudEventsValidation(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "v", map[string]any{"partitions": 1}, http.StatusCreated)
	base := map[string]any{"specversion": "1.0", "id": "x", "source": "/s", "type": "t"}
	with := func(kv ...any) []byte {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
			} else {
				m[kv[i].(string)] = kv[i+1]
			}
		}
		b, _ := json.Marshal(m)
		return b
	}
	structured := http.Header{"Content-Type": {ctStructured}}
	cases := []struct {
		name, field string
		body        []byte
	}{
		{"no id", "id", with("id", nil)},
		{"no source", "source", with("source", nil)},
		{"no type", "type", with("type", nil)},
		{"no specversion", "specversion", with("specversion", nil)},
		{"specversion 0.3", "specversion", with("specversion", "0.3")},
		{"id not a string", "id", with("id", 7)},
		{"empty source", "source", with("source", "")},
		{"uppercase extension", "comExample", with("comExample", "v")},
		{"extension with underscore", "com_example", with("com_example", "v")},
		{"extension of 21 characters", "abcdefghijabcdefghijk", with("abcdefghijabcdefghijk", "v")},
		{"object extension", "ext", with("ext", map[string]any{"a": 1})},
		{"time not RFC 3339", "time", with("time", "2026-01-02 03:04:05")},
		{"data and data_base64", "data", with("data", 1, "data_base64", "AA==")},
		{"bad base64", "data_base64", with("data_base64", "not base64!")},
		{"dataschema not absolute", "dataschema", with("dataschema", "schemas/x")},
		{"bad datacontenttype", "datacontenttype", with("datacontenttype", "not a type;;")},
		{"partitionkey not a string", "partitionkey", with("partitionkey", 5)},
	}
	for _, c := range cases {
		r := publishCloud(t, env, "v", c.body, structured)
		p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
		require.Contains(t, p["detail"], c.field, "%s: the problem names the attribute", c.name)
	}

	bin := func(kv ...string) http.Header {
		h := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"x"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				h.Del(kv[i])
			} else {
				h.Set(kv[i], kv[i+1])
			}
		}
		return h
	}
	binCases := []struct {
		name, field string
		header      http.Header
		body        string
	}{
		{"percent-encoded invalid UTF-8", "ce-subject", bin("Ce-Subject", "caf%E9"), ""},
		{"raw invalid UTF-8", "ce-subject", bin("Ce-Subject", "caf\xe9"), ""},
		{"bad percent-encoding", "ce-subject", bin("Ce-Subject", "100%"), ""},
		{"no ce-source", "ce-source", bin("Ce-Source", ""), ""},
		{"specversion 0.3", "ce-specversion", bin("Ce-Specversion", "0.3"), ""},
		{"ce-datacontenttype", "ce-datacontenttype", bin("Ce-Datacontenttype", "text/plain"), ""},
		{"bad extension name", "ce-bad_name", bin("Ce-Bad_name", "v"), ""},
		{"JSON content type, not JSON", "data", bin("Content-Type", "application/json"), "{not json"},
		{"time not RFC 3339", "ce-time", bin("Ce-Time", "tomorrow"), ""},
	}
	for _, c := range binCases {
		r := publishCloud(t, env, "v", []byte(c.body), c.header)
		p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
		require.Contains(t, p["detail"], c.field, "%s: the problem names the attribute", c.name)
	}
	require.Empty(t, readCloud(t, env, "v", "?partition=0"), "nothing refused was written")

	// The JSON publish is unchanged by a ce- header that is not
	// ce-specversion.
	r := env.DoWith("POST", tpath("v", "/events"), `{"events": [{"type": "plain"}]}`,
		http.Header{"Authorization": {"Bearer " + ferrytest.AdminKey}, "Ce-Id": {"ignored"}})
	require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Body)
	evs := readCloud(t, env, "v", "?partition=0")
	require.Len(t, evs, 1)
	require.Equal(t, "/ferry/topics/v", evs[0].Source, "a plain JSON event gets the topic's source")
	require.Equal(t, "application/json", *evs[0].DataContentType)
	require.Equal(t, evs[0].PublishedAt.UTC().Format("2006-01-02T15:04:05.000000Z"), *evs[0].Time, "time = published_at")
	require.True(t, strings.HasSuffix(*evs[0].Time, "Z"))
}
