package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// testCLIQueue: every queue command, in both output forms.
func testCLIQueue(t *testing.T, r *cliRun) {
	t.Run("create", func(t *testing.T) {
		out := r.ok(t, "", "queue", "create", "orders", "--max-receives", "2", "--retry-min", "0", "--retry-max", "0")
		require.Contains(t, out, "max_receives                2")
		var q struct {
			Name              string `json:"name"`
			VisibilityTimeout int    `json:"visibility_timeout_seconds"`
		}
		r.okJSON(t, &q, "", "queue", "create", "orders", "--visibility-timeout", "45")
		require.Equal(t, "orders", q.Name)
		require.Equal(t, 45, q.VisibilityTimeout)
	})
	t.Run("send", func(t *testing.T) {
		out := r.ok(t, "", "queue", "send", "orders", `{"n": 1}`, "--attr", "kind=test", "--dedup-id", "d1")
		require.Equal(t, []string{"ID", "DUPLICATE"}, rows(out)[0])
		require.Equal(t, "false", rows(out)[1][1])
		var sent []struct{ Duplicate bool }
		r.okJSON(t, &sent, "", "queue", "send", "orders", `{"n": 1}`, "--dedup-id", "d1")
		require.True(t, sent[0].Duplicate)
		r.okJSON(t, &sent, "{\"n\": 2}\nplain text\n\n[3]\n", "queue", "send", "orders")
		require.Len(t, sent, 3, "one message per non-empty line of stdin")
	})
	t.Run("get", func(t *testing.T) {
		var q struct{ Stats struct{ Available int } }
		r.okJSON(t, &q, "", "queue", "get", "orders")
		require.Equal(t, 4, q.Stats.Available)
		require.Contains(t, r.ok(t, "", "queue", "get", "orders"), "available                   4")
	})
	t.Run("ls", func(t *testing.T) {
		out := r.ok(t, "", "queue", "ls")
		require.Equal(t, []string{"orders", "4", "0", "0", "0"}, rows(out)[1][:5])
	})
	t.Run("receive", func(t *testing.T) {
		var ms []struct {
			Body       json.RawMessage
			Attributes map[string]string
		}
		r.okJSON(t, &ms, "", "queue", "receive", "orders", "--ack")
		require.JSONEq(t, `{"n": 1}`, string(ms[0].Body))
		require.Equal(t, "test", ms[0].Attributes["kind"])
		out := r.ok(t, "", "queue", "receive", "orders", "--max", "10", "--visibility-timeout", "1")
		require.Len(t, rows(out), 4, "a header and three messages")
		require.Contains(t, out, `"plain text"`)
	})
	t.Run("dead-letters", func(t *testing.T) {
		var ms []struct{ Receipt string }
		r.okJSON(t, &ms, "", "queue", "receive", "orders", "--max", "10", "--wait", "5")
		require.NotEmpty(t, ms)
		// The claims above lasted a second; nack the messages to the dead letters.
		for _, m := range ms {
			r.env.Do("POST", "/v1/queues/orders/nack", map[string]any{"receipts": []string{m.Receipt}, "dead_letter": true})
		}
		var dl []struct{ ID string }
		r.okJSON(t, &dl, "", "queue", "dead-letters", "ls", "orders")
		require.Len(t, dl, len(ms))
		out := r.ok(t, "", "queue", "dead-letters", "redrive", "orders", "--id", dl[0].ID)
		require.Contains(t, out, "redriven  1")
		r.ok(t, "", "queue", "dead-letters", "purge", "orders")
		r.okJSON(t, &dl, "", "queue", "dead-letters", "ls", "orders")
		require.Empty(t, dl)
	})
	t.Run("purge", func(t *testing.T) {
		require.Contains(t, r.ok(t, "", "queue", "purge", "orders"), "purged queue orders")
		var q struct {
			Stats struct{ Available, InFlight int }
		}
		r.okJSON(t, &q, "", "queue", "get", "orders")
		require.Zero(t, q.Stats.Available+q.Stats.InFlight)
	})
	t.Run("delete", func(t *testing.T) {
		r.ok(t, "", "queue", "delete", "orders")
		_, errOut, code := r.run(t, "", "queue", "get", "orders")
		require.Equal(t, 1, code, "a problem is a failure")
		require.Contains(t, errOut, "404 not_found")
	})
}
