package push

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// A traceparent stored before sends refused invalid ones is dropped, not
// sent: a header net/http refuses would fail every attempt.
func TestPushBodyDropsInvalidTraceparent(t *testing.T) {
	t.Parallel()
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for v, want := range map[string]string{good: good, "bad\nvalue": "", "x": ""} {
		attrs, _ := json.Marshal(map[string]string{"traceparent": v})
		_, h, err := pushBody(store.PushTarget{}, store.Message{ID: 1, Body: json.RawMessage(`1`), Attributes: attrs})
		require.NoError(t, err)
		require.Equal(t, want, h.Get("traceparent"), "queue message, %q", v)
		event, _ := json.Marshal(map[string]any{"id": "e", "attributes": map[string]string{"traceparent": v}})
		_, h, err = pushBody(store.PushTarget{Subscription: true}, store.Message{ID: 1, Body: event})
		require.NoError(t, err)
		require.Equal(t, want, h.Get("traceparent"), "subscription event, %q", v)
	}
}

// A queue message's body nesting deeper than encoding/json writes (a row
// no face accepts, written to the tables directly) fails its attempt with
// an error that says so, and no request is sent: before, it was POSTed
// with an empty body.
func TestPushUnencodableBodyFailsTheAttempt(t *testing.T) {
	t.Parallel()
	deep := json.RawMessage(strings.Repeat("[", 10001) + strings.Repeat("]", 10001))
	_, _, err := pushBody(store.PushTarget{}, store.Message{ID: 1, Body: deep})
	require.Error(t, err)

	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	p := &Pusher{cfg: Config{Client: srv.Client()}}
	target := store.PushTarget{Queue: store.Queue{Push: &store.PushConfig{URL: srv.URL, TimeoutSeconds: 5}}}
	r := p.deliver(context.Background(), target, store.Message{ID: 1, Body: deep})
	require.False(t, r.ok())
	require.Contains(t, r.err, "cannot encode the message")
	require.Zero(t, hits.Load(), "nothing is POSTed")

	r = p.deliver(context.Background(), target, store.Message{ID: 2, Body: json.RawMessage(`{"a":1}`)})
	require.True(t, r.ok(), "a neighbour is delivered: %s", r.err)
	require.EqualValues(t, 1, hits.Load())
}
