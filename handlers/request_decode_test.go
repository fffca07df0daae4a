package handlers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

func TestBadRequests(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	receipt := setupBad(t, env)
	const inv, tooLarge = "invalid_request", "payload_too_large"
	bad := http.StatusBadRequest

	one := func(m map[string]any) map[string]any { return map[string]any{"messages": []any{m}} }
	many := func(n int) map[string]any {
		ms := make([]any, n)
		for i := range ms {
			ms[i] = map[string]any{"body": i}
		}
		return map[string]any{"messages": ms}
	}

	cases := []badCase{
		// PUT /v1/queues/{queue}, on an existing queue and on a new one.
		{"put malformed", "PUT", "/v1/queues/bad", `{"max_receives": }`, nil, bad, inv},
		{"put truncated", "PUT", "/v1/queues/bad", `{"max_receives": 3`, nil, bad, inv},
		{"put trailing garbage", "PUT", "/v1/queues/bad", `{"max_receives": 3} x`, nil, bad, inv},
		{"put two objects", "PUT", "/v1/queues/bad", `{"max_receives": 3}{}`, nil, bad, inv},
		{"put array", "PUT", "/v1/queues/bad", `[]`, nil, bad, inv},
		{"put null", "PUT", "/v1/queues/bad", `null`, nil, bad, inv},
		{"put string for int", "PUT", "/v1/queues/bad", `{"max_receives": "3"}`, nil, bad, inv},
		{"put fraction", "PUT", "/v1/queues/bad", `{"max_receives": 2.5}`, nil, bad, inv},
		{"put bool for int", "PUT", "/v1/queues/bad", `{"max_depth": true}`, nil, bad, inv},
		{"put unknown field", "PUT", "/v1/queues/bad", `{"visibility_timeout": 3}`, nil, bad, inv},
		{"put unknown field beside known", "PUT", "/v1/queues/bad", `{"max_receives": 3, "push_url": "x"}`, nil, bad, inv},
		{"put invalid utf-8", "PUT", "/v1/queues/bad", "{\"max_receives\": 3, \"x\": \"\xff\"}", nil, bad, inv},
		{"put max_depth -1", "PUT", "/v1/queues/bad", map[string]any{"max_depth": -1}, nil, bad, inv},
		{"put max_depth 1e13", "PUT", "/v1/queues/bad", `{"max_depth": 10000000000000}`, nil, bad, inv},
		{"put max_depth over int64", "PUT", "/v1/queues/bad", `{"max_depth": 99999999999999999999}`, nil, bad, inv},
		{"put visibility 1e20", "PUT", "/v1/queues/bad", `{"visibility_timeout_seconds": 1e20}`, nil, bad, inv},
		{"put visibility -1", "PUT", "/v1/queues/bad", map[string]any{"visibility_timeout_seconds": -1}, nil, bad, inv},
		{"put visibility 43201", "PUT", "/v1/queues/bad", map[string]any{"visibility_timeout_seconds": 43201}, nil, bad, inv},
		{"put max_receives -1", "PUT", "/v1/queues/bad", map[string]any{"max_receives": -1}, nil, bad, inv},
		{"put max_receives 1001", "PUT", "/v1/queues/bad", map[string]any{"max_receives": 1001}, nil, bad, inv},
		{"put retention 59", "PUT", "/v1/queues/bad", map[string]any{"retention_seconds": 59}, nil, bad, inv},
		{"put retention 1209601", "PUT", "/v1/queues/bad", map[string]any{"retention_seconds": 1209601}, nil, bad, inv},
		{"put delay -1", "PUT", "/v1/queues/bad", map[string]any{"delay_seconds": -1}, nil, bad, inv},
		{"put delay 86401", "PUT", "/v1/queues/bad", map[string]any{"delay_seconds": 86401}, nil, bad, inv},
		{"put delay not below retention", "PUT", "/v1/queues/bad", map[string]any{"delay_seconds": 3600, "retention_seconds": 3600}, nil, bad, inv},
		{"put dedup window -1", "PUT", "/v1/queues/bad", map[string]any{"dedup_window_seconds": -1}, nil, bad, inv},
		{"put retry_min > retry_max", "PUT", "/v1/queues/bad", map[string]any{"retry_min_seconds": 10, "retry_max_seconds": 5}, nil, bad, inv},
		{"put retry_min > current retry_max", "PUT", "/v1/queues/bad", map[string]any{"retry_min_seconds": 301}, nil, bad, inv},
		{"put retry_max < current retry_min", "PUT", "/v1/queues/bad", map[string]any{"retry_max_seconds": 0}, nil, bad, inv},
		{"put retry_min -1", "PUT", "/v1/queues/bad", map[string]any{"retry_min_seconds": -1}, nil, bad, inv},
		{"put new malformed", "PUT", "/v1/queues/fresh", `{`, nil, bad, inv},
		{"put new unknown field", "PUT", "/v1/queues/fresh", `{"nope": 1}`, nil, bad, inv},
		{"put new out of range", "PUT", "/v1/queues/fresh", map[string]any{"max_depth": -1}, nil, bad, inv},
		{"put new retry_min > retry_max", "PUT", "/v1/queues/fresh", map[string]any{"retry_min_seconds": 400}, nil, bad, inv},

		// POST /v1/queues/{queue}/messages
		{"send malformed", "POST", "/v1/queues/bad/messages", `{"messages": [`, nil, bad, inv},
		{"send not json", "POST", "/v1/queues/bad/messages", `hello`, nil, bad, inv},
		{"send empty body", "POST", "/v1/queues/bad/messages", ``, nil, bad, inv},
		{"send trailing garbage", "POST", "/v1/queues/bad/messages", `{"messages":[{"body":1}]}]`, nil, bad, inv},
		{"send trailing object", "POST", "/v1/queues/bad/messages", `{"messages":[{"body":1}]} {"messages":[{"body":2}]}`, nil, bad, inv},
		{"send missing messages", "POST", "/v1/queues/bad/messages", `{}`, nil, bad, inv},
		{"send null messages", "POST", "/v1/queues/bad/messages", `{"messages": null}`, nil, bad, inv},
		{"send empty batch", "POST", "/v1/queues/bad/messages", `{"messages": []}`, nil, bad, inv},
		{"send messages object", "POST", "/v1/queues/bad/messages", `{"messages": {"body": 1}}`, nil, bad, inv},
		{"send message not object", "POST", "/v1/queues/bad/messages", `{"messages": [1]}`, nil, bad, inv},
		{"send missing body", "POST", "/v1/queues/bad/messages", one(map[string]any{"attributes": map[string]string{"a": "b"}}), nil, bad, inv},
		{"send unknown top field", "POST", "/v1/queues/bad/messages", `{"messages":[{"body":1}],"queue":"bad"}`, nil, bad, inv},
		{"send unknown message field", "POST", "/v1/queues/bad/messages", `{"messages":[{"body":1,"priority":5}]}`, nil, bad, inv},
		{"send group number", "POST", "/v1/queues/bad/messages", `{"messages":[{"body":1,"group":5}]}`, nil, bad, inv},
		{"send group empty", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "group": ""}), nil, bad, inv},
		{"send group 129", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "group": strings.Repeat("g", 129)}), nil, bad, inv},
		{"send dedup_id empty", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "dedup_id": ""}), nil, bad, inv},
		{"send dedup_id 129", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "dedup_id": strings.Repeat("d", 129)}), nil, bad, inv},
		{"send attribute number", "POST", "/v1/queues/bad/messages", `{"messages":[{"body":1,"attributes":{"a":1}}]}`, nil, bad, inv},
		{"send attributes array", "POST", "/v1/queues/bad/messages", `{"messages":[{"body":1,"attributes":["a"]}]}`, nil, bad, inv},
		{"send attribute empty key", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "attributes": map[string]string{"": "x"}}), nil, bad, inv},
		{"send attribute value 4097", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "attributes": map[string]string{"k": strings.Repeat("v", 4097)}}), nil, bad, inv},
		{"send attribute key 257", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "attributes": map[string]string{strings.Repeat("k", 257): "v"}}), nil, bad, inv},
		{"send group with NUL", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "group": "a\x00b"}), nil, bad, inv},
		{"send delay -1", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "delay_seconds": -1}), nil, bad, inv},
		{"send delay string", "POST", "/v1/queues/bad/messages", `{"messages":[{"body":1,"delay_seconds":"5"}]}`, nil, bad, inv},
		{"send delay 1e20", "POST", "/v1/queues/bad/messages", `{"messages":[{"body":1,"delay_seconds":1e20}]}`, nil, bad, inv},
		{"send delay 1209601", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "delay_seconds": 1209601}), nil, bad, inv},
		{"send delay beyond retention", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "delay_seconds": 345600}), nil, bad, inv},
		{"send deliver_at beyond retention", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "deliver_at": time.Now().Add(5 * 24 * time.Hour).UTC().Format(time.RFC3339)}), nil, bad, inv},
		{"send deliver_at not a time", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "deliver_at": "tomorrow"}), nil, bad, inv},
		{"send delay and deliver_at", "POST", "/v1/queues/bad/messages", one(map[string]any{"body": 1, "delay_seconds": 1, "deliver_at": time.Now().Add(time.Minute).UTC().Format(time.RFC3339)}), nil, bad, inv},
		{"send one bad among good", "POST", "/v1/queues/bad/messages", map[string]any{"messages": []any{
			map[string]any{"body": 1}, map[string]any{"body": 2, "group": "ok"}, map[string]any{"body": 3, "delay_seconds": -5}, map[string]any{"body": 4}}}, nil, bad, inv},
		{"send one beyond retention among good", "POST", "/v1/queues/bad/messages", map[string]any{"messages": []any{
			map[string]any{"body": 1}, map[string]any{"body": 2, "delay_seconds": 400000}}}, nil, bad, inv},
		{"send batch 1001", "POST", "/v1/queues/bad/messages", many(1001), nil, http.StatusRequestEntityTooLarge, tooLarge},

		// POST /v1/queues/{queue}/receive: nothing may be claimed.
		{"receive malformed", "POST", "/v1/queues/bad/receive", `{"max_messages":`, nil, bad, inv},
		{"receive trailing garbage", "POST", "/v1/queues/bad/receive", `{} {}`, nil, bad, inv},
		{"receive unknown field", "POST", "/v1/queues/bad/receive", `{"max": 1}`, nil, bad, inv},
		{"receive string", "POST", "/v1/queues/bad/receive", `{"max_messages": "10"}`, nil, bad, inv},
		{"receive max_messages 0", "POST", "/v1/queues/bad/receive", map[string]any{"max_messages": 0}, nil, bad, inv},
		{"receive max_messages 101", "POST", "/v1/queues/bad/receive", map[string]any{"max_messages": 101}, nil, bad, inv},
		{"receive max_messages -1", "POST", "/v1/queues/bad/receive", map[string]any{"max_messages": -1}, nil, bad, inv},
		{"receive wait 21", "POST", "/v1/queues/bad/receive", map[string]any{"wait_seconds": 21}, nil, bad, inv},
		{"receive wait -1", "POST", "/v1/queues/bad/receive", map[string]any{"wait_seconds": -1}, nil, bad, inv},
		{"receive visibility 43201", "POST", "/v1/queues/bad/receive", map[string]any{"visibility_timeout_seconds": 43201}, nil, bad, inv},
		{"receive visibility 1e20", "POST", "/v1/queues/bad/receive", `{"visibility_timeout_seconds": 1e20}`, nil, bad, inv},
		{"receive visibility -1", "POST", "/v1/queues/bad/receive", map[string]any{"visibility_timeout_seconds": -1}, nil, bad, inv},

		// ack / nack / extend: the in-flight message stays in flight.
		{"ack missing receipts", "POST", "/v1/queues/bad/ack", `{}`, nil, bad, inv},
		{"ack empty receipts", "POST", "/v1/queues/bad/ack", `{"receipts": []}`, nil, bad, inv},
		{"ack receipts string", "POST", "/v1/queues/bad/ack", map[string]any{"receipts": receipt}, nil, bad, inv},
		{"ack malformed receipt", "POST", "/v1/queues/bad/ack", map[string]any{"receipts": []string{"not-a-receipt!"}}, nil, bad, inv},
		{"ack good and malformed", "POST", "/v1/queues/bad/ack", map[string]any{"receipts": []string{receipt, "AAAA"}}, nil, bad, inv},
		{"ack empty receipt", "POST", "/v1/queues/bad/ack", map[string]any{"receipts": []string{receipt, ""}}, nil, bad, inv},
		{"ack unknown field", "POST", "/v1/queues/bad/ack", map[string]any{"receipts": []string{receipt}, "force": true}, nil, bad, inv},
		{"ack 1001 receipts", "POST", "/v1/queues/bad/ack", map[string]any{"receipts": repeat(receipt, 1001)}, nil, http.StatusRequestEntityTooLarge, tooLarge},
		{"nack malformed receipt", "POST", "/v1/queues/bad/nack", map[string]any{"receipts": []string{receipt, "zz"}}, nil, bad, inv},
		{"nack delay -1", "POST", "/v1/queues/bad/nack", map[string]any{"receipts": []string{receipt}, "delay_seconds": -1}, nil, bad, inv},
		{"nack delay 43201", "POST", "/v1/queues/bad/nack", map[string]any{"receipts": []string{receipt}, "delay_seconds": 43201}, nil, bad, inv},
		{"nack error too long", "POST", "/v1/queues/bad/nack", map[string]any{"receipts": []string{receipt}, "error": strings.Repeat("e", 4097)}, nil, bad, inv},
		{"nack error number", "POST", "/v1/queues/bad/nack", `{"receipts": ["` + receipt + `"], "error": 5}`, nil, bad, inv},
		{"nack dead_letter string", "POST", "/v1/queues/bad/nack", `{"receipts": ["` + receipt + `"], "dead_letter": "yes"}`, nil, bad, inv},
		{"nack unknown field", "POST", "/v1/queues/bad/nack", map[string]any{"receipts": []string{receipt}, "requeue": true}, nil, bad, inv},
		{"nack 1001 receipts", "POST", "/v1/queues/bad/nack", map[string]any{"receipts": repeat(receipt, 1001)}, nil, http.StatusRequestEntityTooLarge, tooLarge},
		{"extend missing visibility", "POST", "/v1/queues/bad/extend", map[string]any{"receipts": []string{receipt}}, nil, bad, inv},
		{"extend visibility -1", "POST", "/v1/queues/bad/extend", map[string]any{"receipts": []string{receipt}, "visibility_timeout_seconds": -1}, nil, bad, inv},
		{"extend visibility 43201", "POST", "/v1/queues/bad/extend", map[string]any{"receipts": []string{receipt}, "visibility_timeout_seconds": 43201}, nil, bad, inv},
		{"extend visibility 1e20", "POST", "/v1/queues/bad/extend", `{"receipts": ["` + receipt + `"], "visibility_timeout_seconds": 1e20}`, nil, bad, inv},
		{"extend malformed receipt", "POST", "/v1/queues/bad/extend", map[string]any{"receipts": []string{"%%%"}, "visibility_timeout_seconds": 1}, nil, bad, inv},
		{"extend empty receipts", "POST", "/v1/queues/bad/extend", map[string]any{"receipts": []string{}, "visibility_timeout_seconds": 1}, nil, bad, inv},

		// dead letters
		{"dead letters limit 0", "GET", "/v1/queues/bad/dead-letters?limit=0", nil, nil, bad, inv},
		{"dead letters limit 1001", "GET", "/v1/queues/bad/dead-letters?limit=1001", nil, nil, bad, inv},
		{"dead letters limit abc", "GET", "/v1/queues/bad/dead-letters?limit=abc", nil, nil, bad, inv},
		{"dead letters bad cursor", "GET", "/v1/queues/bad/dead-letters?after=not-a-cursor", nil, nil, bad, inv},
		{"redrive empty object", "POST", "/v1/queues/bad/dead-letters/redrive", `{}`, nil, bad, inv},
		{"redrive both", "POST", "/v1/queues/bad/dead-letters/redrive", map[string]any{"ids": []string{"1"}, "limit": 1}, nil, bad, inv},
		{"redrive empty ids", "POST", "/v1/queues/bad/dead-letters/redrive", map[string]any{"ids": []string{}}, nil, bad, inv},
		{"redrive limit 0", "POST", "/v1/queues/bad/dead-letters/redrive", map[string]any{"limit": 0}, nil, bad, inv},
		{"redrive limit 10001", "POST", "/v1/queues/bad/dead-letters/redrive", map[string]any{"limit": 10001}, nil, bad, inv},
		{"redrive limit string", "POST", "/v1/queues/bad/dead-letters/redrive", `{"limit": "1"}`, nil, bad, inv},
		{"redrive unknown field", "POST", "/v1/queues/bad/dead-letters/redrive", map[string]any{"limit": 1, "all": true}, nil, bad, inv},
		{"redrive malformed", "POST", "/v1/queues/bad/dead-letters/redrive", `{"limit": 1`, nil, bad, inv},
		{"redrive 1001 ids", "POST", "/v1/queues/bad/dead-letters/redrive", map[string]any{"ids": repeat("1", 1001)}, nil, http.StatusRequestEntityTooLarge, tooLarge},

		// Content-Type
		{"put text/plain", "PUT", "/v1/queues/bad", `{"max_receives": 3}`, http.Header{"Content-Type": {"text/plain"}}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"put new text/plain", "PUT", "/v1/queues/fresh", `{}`, http.Header{"Content-Type": {"text/plain"}}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"send text/plain", "POST", "/v1/queues/bad/messages", `{"messages":[{"body":1}]}`, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"send form", "POST", "/v1/queues/bad/messages", `messages=1`, http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"receive text/plain", "POST", "/v1/queues/bad/receive", `{"max_messages": 10}`, http.Header{"Content-Type": {"text/plain"}}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"ack text/plain", "POST", "/v1/queues/bad/ack", `{"receipts": ["` + receipt + `"]}`, http.Header{"Content-Type": {"text/plain"}}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	}
	runBadCases(t, env, cases)

	// After all that, the queue is intact: the in-flight receipt is current.
	require.Equal(t, []string{"ok"}, ack(t, env, "bad", receipt))
	requireProblem(t, env.Do("GET", "/v1/queues/fresh", nil), http.StatusNotFound, "not_found")
}

func TestContentTypeVariantsAccepted(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON", "application/merge-patch+json"} {
		h := http.Header{"Authorization": {"Bearer " + ferrytest.AdminKey}, "Content-Type": {ct}}
		name := fmt.Sprintf("ct%d", i)
		r := env.DoWith("PUT", qpath(name), `{"max_receives": 2}`, h)
		require.Equal(t, http.StatusCreated, r.Status, "Content-Type %q: %s", ct, r.Body)
		var q client.Queue
		require.NoError(t, json.Unmarshal(r.Body, &q))
		require.Equal(t, 2, q.MaxReceives)
	}
}

// TestValidationErrorsNameFields: validation problems list the offending
// fields in `errors`, named as the spec's FieldError says: "a dotted path
// into the request (e.g. `messages.3.delay_seconds`) or a parameter name".
func TestValidationErrorsNameFields(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "v", nil)
	fields := func(p map[string]any) []string {
		errs, ok := p["errors"].([]any)
		require.True(t, ok, "errors: %v", p)
		var out []string
		for _, e := range errs {
			out = append(out, e.(map[string]any)["field"].(string))
		}
		return out
	}

	p := requireProblem(t, env.Do("PUT", "/v1/queues/v", map[string]any{"max_receives": 1001, "retention_seconds": 1}),
		http.StatusBadRequest, "invalid_request")
	require.ElementsMatch(t, []string{"max_receives", "retention_seconds"}, fields(p), "every invalid field is listed")

	p = requireProblem(t, env.Do("POST", "/v1/queues/v/receive", map[string]any{"max_messages": 101}),
		http.StatusBadRequest, "invalid_request")
	require.Equal(t, []string{"max_messages"}, fields(p))

	p = requireProblem(t, env.Do("POST", "/v1/queues/v/messages", map[string]any{"messages": []any{
		msg(1), msg(2), msg(3, "delay_seconds", -1)}}), http.StatusBadRequest, "invalid_request")
	require.Equal(t, []string{"messages[2].delay_seconds"}, fields(p), "array indexes in brackets, as the spec says")
}
