package main

import (
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
	testCLISend(t, r)
	t.Run("peek", func(t *testing.T) {
		out := r.ok(t, "", "queue", "peek", "orders", "--limit", "2")
		require.Equal(t, []string{"ID", "STATE", "RECEIVES", "BODY", "ATTRIBUTES", "VISIBLE_AT"}, rows(out)[0])
		require.Len(t, rows(out), 3, "a header and two messages")
		require.Equal(t, []string{"available", "0"}, rows(out)[1][1:3])
		var ms []struct {
			State        string
			ReceiveCount int `json:"receive_count"`
		}
		r.okJSON(t, &ms, "", "queue", "peek", "orders", "--state", "available")
		require.Len(t, ms, 4)
		r.okJSON(t, &ms, "", "queue", "peek", "orders", "--state", "in_flight")
		require.Empty(t, ms)
		_, errOut, code := r.run(t, "", "queue", "peek", "orders", "--state", "gone")
		require.Equal(t, 1, code)
		require.Contains(t, errOut, "400")
	})
	t.Run("get", func(t *testing.T) {
		var q struct{ Stats struct{ Available int } }
		r.okJSON(t, &q, "", "queue", "get", "orders")
		require.Equal(t, 4, q.Stats.Available, "a peek claims nothing")
		require.Contains(t, r.ok(t, "", "queue", "get", "orders"), "available                   4")
	})
	t.Run("ls", func(t *testing.T) {
		out := r.ok(t, "", "queue", "ls")
		require.Equal(t, []string{"orders", "4", "0", "0", "0"}, rows(out)[1][:5])
	})
	testCLIReceive(t, r)
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
