package handlers_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/store"
)

// The CloudEvents Go SDK (github.com/cloudevents/sdk-go/v2) on both ends:
// events its event package makes are published through its HTTP binding
// in each mode, and every push format is parsed by it, attribute by
// attribute and data byte for byte.

// sdkEvents are the events the SDK tests publish, ids prefixed.
func sdkEvents(t testing.TB, prefix string) []event.Event {
	t.Helper()
	mk := func(id, typ string) event.Event {
		e := event.New()
		e.SetID(prefix + id)
		e.SetSource("https://sdk.example/" + prefix)
		e.SetType(typ)
		return e
	}
	full := mk("full", "com.example.full")
	full.SetSubject("orders/9912 café")
	full.SetTime(time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC))
	full.SetDataSchema("https://sdk.example/schema.json")
	full.SetExtension("partitionkey", "ORD-9912")
	full.SetExtension("comexampleint", 42)
	full.SetExtension("comexamplebool", true)
	require.NoError(t, full.SetData(event.ApplicationJSON, map[string]any{"customer_id": "cust-456", "n": 1}))

	raw := mk("bytes", "com.example.bytes")
	require.NoError(t, raw.SetData("application/octet-stream", []byte{0, 1, 2, 0xff, 0xfe, '\n', 0x80}))

	text := mk("jsontext", "com.example.text")
	require.NoError(t, text.SetData("text/plain", []byte(`{"looks": "like JSON"}`)))

	named := mk("named", "com.example.named")
	named.SetExtension("key", "not the key")
	named.SetExtension("partition", "not the partition")
	named.SetExtension("offset", 99)
	return []event.Event{full, raw, text, named}
}

// sdkRequest is the SDK's HTTP request for one event in a mode
// (structured or binary), to Ferry's publish route of topic.
func sdkRequest(t testing.TB, env *ferrytest.Env, topic string, e event.Event, structured bool) *http.Request {
	t.Helper()
	ctx := binding.WithForceBinary(context.Background())
	if structured {
		ctx = binding.WithForceStructured(context.Background())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.URL+tpath(topic, "/events"), nil)
	require.NoError(t, err)
	require.NoError(t, cehttp.WriteRequest(ctx, binding.ToMessage(&e), req))
	req.Header.Set("Authorization", "Bearer "+ferrytest.AdminKey)
	return req
}

func doSDK(t testing.TB, env *ferrytest.Env, req *http.Request) ferrytest.Response {
	t.Helper()
	resp, err := env.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return ferrytest.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// requireSameCloudEvent compares an event the SDK made with one it
// parsed, attribute by attribute, data byte for byte (JSON data as JSON:
// Ferry keeps it as jsonb). decode percent-decodes what the SDK read from
// binary-mode headers: the SDK neither encodes nor decodes them
// (sdk-go #1331), Ferry does both, as the HTTP binding asks.
func requireSameCloudEvent(t testing.TB, want, got event.Event, decode bool, what string) {
	t.Helper()
	dec := func(s string) string {
		if !decode {
			return s
		}
		d, err := url.PathUnescape(s)
		require.NoError(t, err, "%s: %q", what, s)
		return d
	}
	require.Equal(t, "1.0", got.SpecVersion(), what)
	require.Equal(t, want.ID(), got.ID(), what)
	require.Equal(t, want.Source(), dec(got.Source()), what)
	require.Equal(t, want.Type(), got.Type(), what)
	require.Equal(t, want.Subject(), dec(got.Subject()), what)
	require.True(t, want.Time().Equal(got.Time()), "%s: time %v, got %v", what, want.Time(), got.Time())
	require.Equal(t, want.DataContentType(), got.DataContentType(), what)
	require.Equal(t, want.DataSchema(), got.DataSchema(), what)
	wantExt, gotExt := map[string]string{}, map[string]string{}
	for k, v := range want.Extensions() {
		wantExt[k], _ = types.Format(v)
	}
	for k, v := range got.Extensions() {
		s, err := types.Format(v)
		require.NoError(t, err)
		gotExt[k] = dec(s)
	}
	require.Equal(t, wantExt, gotExt, "%s: extensions", what)
	if strings.Contains(want.DataContentType(), "json") {
		require.JSONEq(t, string(want.Data()), string(got.Data()), what)
	} else {
		require.Equal(t, want.Data(), got.Data(), "%s: data byte for byte", what)
	}
}

func TestCloudEventsSDKBothEnds(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	formats := []string{"cloudevents", "cloudevents-binary"}
	got := map[string]chan event.Event{}
	for _, f := range formats {
		ch := make(chan event.Event, 100)
		got[f] = ch
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, h hookRequest) {
			req := &http.Request{Header: h.header, Body: io.NopCloser(bytes.NewReader(h.body))}
			e, err := cehttp.NewEventFromHTTPRequest(req)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			ch <- *e
		})
		for _, topic := range []string{"structured", "binary", "batch"} {
			if f == formats[0] {
				putTopic(t, env, topic, map[string]any{"partitions": 2}, http.StatusCreated)
			}
			newPushSub(t, env, topic, f, fast(map[string]any{"push": map[string]any{"url": rc.url(), "format": f}}))
		}
	}

	sent := map[string]event.Event{}
	for _, topic := range []string{"structured", "binary"} {
		for _, e := range sdkEvents(t, topic+"-") {
			sent[e.ID()] = e
			r := doSDK(t, env, sdkRequest(t, env, topic, e, topic == "structured"))
			res := publishedOf(t, r)
			require.Equal(t, e.ID(), res[0].ID)
		}
	}
	batch := sdkEvents(t, "batch-")
	req, err := cehttp.NewHTTPRequestFromEvents(context.Background(), env.URL+tpath("batch", "/events"), batch)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+ferrytest.AdminKey)
	res := publishedOf(t, doSDK(t, env, req))
	require.Len(t, res, len(batch))
	for _, e := range batch {
		sent[e.ID()] = e
	}
	full := sent["structured-full"]
	require.Equal(t, store.PartitionForKey("ORD-9912", 2), partitionOf(t, env, "structured", "structured-full"),
		"the partitionkey extension picks the partition")

	// Pushes in each format, parsed by the SDK.
	for _, f := range formats {
		seen := map[string]bool{}
		for len(seen) < len(sent) {
			select {
			case e := <-got[f]:
				want, ok := sent[e.ID()]
				require.True(t, ok, "%s: unknown id %s", f, e.ID())
				requireSameCloudEvent(t, want, e, f == "cloudevents-binary", f+" "+e.ID())
				seen[e.ID()] = true
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: %d of %d events pushed", f, len(seen), len(sent))
			}
		}
	}

	// Reads as CloudEvents batches, parsed by the SDK.
	for _, topic := range []string{"structured", "binary", "batch"} {
		n := 0
		for p := 0; p < 2; p++ {
			r := env.DoWith("GET", tpath(topic, "/events")+"?partition="+string(rune('0'+p)), nil, http.Header{
				"Authorization": {"Bearer " + ferrytest.AdminKey}, "Accept": {event.ApplicationCloudEventsBatchJSON}})
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			var evs []event.Event
			require.NoError(t, json.Unmarshal(r.Body, &evs))
			for _, e := range evs {
				requireSameCloudEvent(t, sent[e.ID()], e, false, "read "+e.ID())
				n++
			}
		}
		require.Equal(t, 4, n, topic)
	}
	require.Equal(t, "orders/9912 café", full.Subject())
}

// partitionOf finds the partition of event id (by reading both of the
// topic's two partitions).
func partitionOf(t testing.TB, env *ferrytest.Env, topic, id string) int {
	t.Helper()
	for p, q := range []string{"?partition=0", "?partition=1"} {
		for _, e := range readCloud(t, env, topic, q) {
			if e.ID == id {
				return p
			}
		}
	}
	t.Fatalf("event %s not found", id)
	return -1
}

// TestCloudEventsSDKBinaryDataAtTheLimit: about 1 MiB of binary data, at
// exactly the body limit (configured to it), is kept byte for byte; three
// bytes more (the next base64 quantum: the limit counts data_base64) is a
// 413 that writes nothing, in binary and in structured mode.
func TestCloudEventsSDKBinaryDataAtTheLimit(t *testing.T) {
	t.Parallel()
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i*7 + i/256)
	}
	ct := "application/octet-stream"
	enc := base64.StdEncoding.EncodeToString(data)
	stored, err := json.Marshal(store.CloudAttrs{Source: "/big", DataContentType: &ct, DataBase64: &enc})
	require.NoError(t, err)
	limit := len(stored) // what the event counts: its attributes and data_base64 as stored
	env := ferrytest.Start(t, allowPrivatePush, withLimits(limit, 4<<20))
	putTopic(t, env, "big", map[string]any{"partitions": 1}, http.StatusCreated)
	rc := newReceiver(t, nil)
	newPushSub(t, env, "big", "s", fast(map[string]any{"push": map[string]any{"url": rc.url(), "format": "cloudevents-binary"}}))

	mk := func(id string, d []byte) event.Event {
		e := event.New()
		e.SetID(id)
		e.SetSource("/big")
		e.SetType("big")
		require.NoError(t, e.SetData(ct, d))
		return e
	}
	// The id and type are not in ce: the limit counts only what ce holds.
	at := mk("at", data)
	publishedOf(t, doSDK(t, env, sdkRequest(t, env, "big", at, false)))
	over := mk("over", append(append([]byte(nil), data...), 1, 2, 3))
	r := doSDK(t, env, sdkRequest(t, env, "big", over, false))
	requireProblem(t, r, http.StatusRequestEntityTooLarge, "payload_too_large")
	r = doSDK(t, env, sdkRequest(t, env, "big", over, true))
	requireProblem(t, r, http.StatusRequestEntityTooLarge, "payload_too_large")

	h := rc.wait(t, 1)[0]
	e, err := cehttp.NewEventFromHTTPRequest(&http.Request{Header: h.header, Body: io.NopCloser(bytes.NewReader(h.body))})
	require.NoError(t, err)
	requireSameCloudEvent(t, at, *e, true, "pushed")
	waitDrained(t, env, "big", "s")
	require.Len(t, readCloud(t, env, "big", "?partition=0"), 1, "the event over the limit was not written")
	require.Equal(t, 1, rc.count())
}
