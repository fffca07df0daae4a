package handlers

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

// FuzzMessagesReplyAsEncodingJSON: a receive's answers, of a queue and of
// a subscription, are encoding/json's bytes for any strings and JSON
// values.
func FuzzMessagesReplyAsEncodingJSON(f *testing.F) {
	f.Add("17", `{"a": [1, 2], "s": " x "}`, `{"k":"v"}`, "g\u2028\"<", "Zm9v", int64(3), true)
	f.Add("", "null", "{}", "\xff\x00", "", int64(-1), false)
	f.Fuzz(func(t *testing.T, id, body, attrs, s, receipt string, n int64, set bool) {
		if !json.Valid([]byte(body)) || !json.Valid([]byte(attrs)) {
			t.Skip("stored values are valid JSON")
		}
		m := receivedMessageReply{messageHeadReply: messageHeadReply{ID: id, Body: json.RawMessage(body), Attributes: json.RawMessage(attrs)},
			Receipt: receipt, ReceiveCount: int(n % 1000), SentAt: time.Unix(n%(1<<34), n%1e9).UTC()}
		if set {
			m.Group, m.DedupID = &s, &id
		}
		for _, msgs := range [][]receivedMessageReply{{m, {}}, {}, nil} {
			want := encodedBy(t, func(c echo.Context) error { return reply(c, http.StatusOK, map[string]any{"messages": msgs}) })
			require.Equal(t, string(want), string(encodedBy(t, func(c echo.Context) error { return replyReceived(c, msgs) })))
		}
		sub := subscriptionMessageReply{ID: s, Event: json.RawMessage(body), Receipt: receipt, ReceiveCount: int(n % 1000)}
		for _, msgs := range [][]subscriptionMessageReply{{sub, {}}, {}, nil} {
			want := encodedBy(t, func(c echo.Context) error { return reply(c, http.StatusOK, map[string]any{"messages": msgs}) })
			require.Equal(t, string(want), string(encodedBy(t, func(c echo.Context) error { return replySubscriptionMessages(c, msgs) })))
		}
	})
}
