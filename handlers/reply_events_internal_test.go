package handlers

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

// encodedBy answers through write and returns the body.
func encodedBy(t *testing.T, write func(echo.Context) error) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), rec)
	require.NoError(t, write(c))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, echo.MIMEApplicationJSON, rec.Header().Get(echo.HeaderContentType))
	return rec.Body.Bytes()
}

// requireAsEncodingJSON requires that the hand-written answers of events
// are the bytes reply (encoding/json) writes for the same values.
func requireAsEncodingJSON(t *testing.T, events []eventReply) {
	t.Helper()
	poll := pollReply{Generation: 7, Partitions: []int{0, 3}, Events: events}
	want := encodedBy(t, func(c echo.Context) error { return reply(c, http.StatusOK, poll) })
	require.Equal(t, string(want), string(encodedBy(t, func(c echo.Context) error { return replyPoll(c, poll) })))
	read := map[string]any{"events": events, "next_offset": int64(42)}
	want = encodedBy(t, func(c echo.Context) error { return reply(c, http.StatusOK, read) })
	require.Equal(t, string(want), string(encodedBy(t, func(c echo.Context) error { return replyEventsRead(c, events, 42) })))
}

// FuzzEventsReplyAsEncodingJSON: strings of any bytes (control
// characters, quotes, invalid UTF-8, U+2028, HTML's <>&), JSON values
// with whitespace inside and between tokens, optional members set or
// not, extensions in any order: always encoding/json's bytes.
func FuzzEventsReplyAsEncodingJSON(f *testing.F) {
	f.Add("evt_1", "order.created", "k", `{"a": 1, "b" : [1, 2,3] }`, `{"x":"y"}`, "\u2028<&>\"\\\x01\x7f\xff", int64(0), true)
	f.Add("", "t", "", `"a string with \" and spaces "`, `{}`, "é\n\t\b\f\r", int64(-5), false)
	f.Add("id", "t", "\x00", "null", "{ }", "\u2029\xe2\x80", int64(1<<40), true)
	f.Add("id", "t", "key", " [ { \"k\" : \"v w\" } , true , null ] ", `{"traceparent":"00-x"}`, "plain", int64(3), false)
	f.Fuzz(func(t *testing.T, id, typ, key, data, attrs, s string, n int64, set bool) {
		if !json.Valid([]byte(data)) || !json.Valid([]byte(attrs)) {
			t.Skip("stored values are valid JSON")
		}
		at := time.Unix(n%(1<<34), n%1e9).UTC()
		ev := eventReply{ID: id, Type: typ, Data: json.RawMessage(data), Attributes: json.RawMessage(attrs),
			Partition: int(n % 64), Offset: n, PublishedAt: at, Source: s,
			Extensions: map[string]json.RawMessage{s: json.RawMessage(data), "b": json.RawMessage(` "x" `), "a": json.RawMessage(attrs)}}
		if set {
			ev.Key, ev.Subject, ev.Time, ev.DataContentType, ev.DataSchema, ev.DataBase64 = &key, &s, &id, &typ, &key, &s
		}
		requireAsEncodingJSON(t, []eventReply{ev, {ID: s, Extensions: map[string]json.RawMessage{}}})
		requireAsEncodingJSON(t, []eventReply{})
		requireAsEncodingJSON(t, nil)
	})
}

// The poll's partitions: none is [] (the store's answer), and a nil
// list null, as encoding/json writes them.
func TestReplyPollPartitions(t *testing.T) {
	for _, parts := range [][]int{nil, {}, {5}} {
		poll := pollReply{Partitions: parts, Events: []eventReply{}}
		want := encodedBy(t, func(c echo.Context) error { return reply(c, http.StatusOK, poll) })
		got := encodedBy(t, func(c echo.Context) error { return replyPoll(c, poll) })
		require.True(t, bytes.Equal(want, got), "%s\n%s", want, got)
	}
}
