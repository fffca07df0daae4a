package push

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestPercentEncode: the binding's rule, byte by byte of the UTF-8 text.
func TestPercentEncode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain/ascii-1.0": "plain/ascii-1.0",
		"a b":             "a%20b",
		`say "hi" 100%`:   "say%20%22hi%22%20100%25",
		"é":               "%C3%A9",
		"tab\there":       "tab%09here",
		"\x7f":            "%7F",
	} {
		require.Equal(t, want, percentEncode(in), "%q", in)
	}
}

// TestCloudPayloadFormats: one delivery body in each CloudEvents format.
func TestCloudPayloadFormats(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"e1","type":"order.created","key":"k 1","data":{"n":1},"attributes":{},
		"source":"/ferry/topics/t","time":"2026-01-01T00:00:00.000000Z","datacontenttype":"application/json",
		"subject":"ünïcode","extensions":{"tenant":"acme","level":3}}`)

	h := http.Header{}
	out, err := cloudPayload(store.PushFormatCloudEvents, body, h)
	require.NoError(t, err)
	require.Equal(t, "application/cloudevents+json", h.Get("Content-Type"))
	require.JSONEq(t, `{"specversion":"1.0","id":"e1","type":"order.created","source":"/ferry/topics/t",
		"time":"2026-01-01T00:00:00.000000Z","datacontenttype":"application/json","subject":"ünïcode",
		"tenant":"acme","level":3,"partitionkey":"k 1","data":{"n":1}}`, string(out),
		"structured: extensions at the top level, the key as partitionkey")

	h = http.Header{}
	out, err = cloudPayload(store.PushFormatCloudEventsBinary, body, h)
	require.NoError(t, err)
	require.JSONEq(t, `{"n":1}`, string(out), "binary: the data is the body")
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, "1.0", h.Get("Ce-Specversion"))
	require.Equal(t, "%C3%BCn%C3%AFcode", h.Get("Ce-Subject"))
	require.Equal(t, "k%201", h.Get("Ce-Partitionkey"))
	require.Equal(t, "3", h.Get("Ce-Level"), "a number extension as its JSON text")
}

// TestCloudPayloadBinaryData: data_base64 goes out as its bytes, and JSON
// string data of a non-JSON content type as the string's text.
func TestCloudPayloadBinaryData(t *testing.T) {
	t.Parallel()
	raw := []byte{0, 1, 2, 0xff}
	b64, _ := json.Marshal(map[string]any{"id": "e2", "type": "t", "source": "/s", "data": nil,
		"data_base64": base64.StdEncoding.EncodeToString(raw), "datacontenttype": "application/octet-stream"})
	h := http.Header{}
	out, err := cloudPayload(store.PushFormatCloudEventsBinary, b64, h)
	require.NoError(t, err)
	require.Equal(t, raw, out)
	require.Equal(t, "application/octet-stream", h.Get("Content-Type"))

	text := []byte(`{"id":"e3","type":"t","source":"/s","data":"<p>hi</p>","datacontenttype":"text/html"}`)
	h = http.Header{}
	out, err = cloudPayload(store.PushFormatCloudEventsBinary, text, h)
	require.NoError(t, err)
	require.Equal(t, "<p>hi</p>", string(out))
	require.True(t, jsonMedia("application/vnd.x+json; charset=utf-8"))
	require.False(t, jsonMedia("text/html"))
}

// TestCloudPayloadRefusesSourceless: a delivery written before CloudEvents
// support carries no source; its push fails with a reason, not a CloudEvent
// missing a required attribute.
func TestCloudPayloadRefusesSourceless(t *testing.T) {
	t.Parallel()
	_, err := cloudPayload(store.PushFormatCloudEvents, []byte(`{"id":"e","type":"t","data":1}`), http.Header{})
	require.ErrorContains(t, err, "no CloudEvents source")
	_, err = StructuredCloudEvent([]byte(`not json`))
	require.Error(t, err)
}
