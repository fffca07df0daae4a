package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testCLISend: queue send, one message from the argument or one per line
// of stdin, in both output forms (testCLIQueue runs it after create).
func testCLISend(t *testing.T, r *cliRun) {
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
}

// testCLIReceive: queue receive, and the dead-letters commands
// (testCLIQueue runs it on the four messages testCLISend sent).
func testCLIReceive(t *testing.T, r *cliRun) {
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
	t.Run("receive --wait 0", func(t *testing.T) {
		r.env.Do("PUT", "/v1/queues/patient", map[string]any{"receive_wait_seconds": 3})
		began := time.Now()
		r.ok(t, "", "queue", "receive", "patient", "--wait", "0")
		require.Less(t, time.Since(began), 2*time.Second, "--wait 0 answers at once on a queue that long-polls by default")
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
}
