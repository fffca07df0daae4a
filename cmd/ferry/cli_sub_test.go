package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// testCLISub: sub create, ls, get, receive, seek, purge, delete.
func testCLISub(t *testing.T, r *cliRun) {
	r.ok(t, "", "topic", "create", "feed")
	t.Run("create", func(t *testing.T) {
		out := r.ok(t, "", "sub", "create", "feed", "s", "--type", "order.*", "--start", "earliest", "--max-receives", "3")
		require.Contains(t, out, "order.*")
		_, errOut, code := r.run(t, "", "sub", "create", "feed", "p", "--push-url", "http://127.0.0.1:9/hook")
		require.Equal(t, 1, code, "the server refuses a loopback push URL unless allowed: %s", errOut)
		require.Contains(t, errOut, "400")
	})
	r.ok(t, "", "topic", "publish", "feed", `{"id": 1}`, "--type", "order.created", "--key", "o1")
	r.ok(t, "", "topic", "publish", "feed", `{}`, "--type", "user.created")
	t.Run("peek", func(t *testing.T) {
		out := r.ok(t, "", "sub", "peek", "feed", "s")
		require.Len(t, rows(out), 2, "a header and the one event the filter lets through")
		require.Equal(t, []string{"available", "0", "order.created"}, rows(out)[1][1:4])
		var ds []struct{ State string }
		r.okJSON(t, &ds, "", "sub", "peek", "feed", "s", "--state", "delayed")
		require.Empty(t, ds)
	})
	t.Run("ls", func(t *testing.T) {
		require.Equal(t, []string{"s", "1", "0", "0", "0", "-"}, rows(r.ok(t, "", "sub", "ls", "feed"))[1])
	})
	t.Run("get", func(t *testing.T) {
		var s struct {
			MaxReceives int `json:"max_receives"`
			Stats       struct{ Available int }
		}
		r.okJSON(t, &s, "", "sub", "get", "feed", "s")
		require.Equal(t, 3, s.MaxReceives)
		require.Equal(t, 1, s.Stats.Available)
	})
	t.Run("receive", func(t *testing.T) {
		var ds []struct{ Event struct{ Type, Key string } }
		r.okJSON(t, &ds, "", "sub", "receive", "feed", "s", "--max", "10", "--ack")
		require.Len(t, ds, 1)
		require.Equal(t, "order.created", ds[0].Event.Type)
		require.Equal(t, "o1", ds[0].Event.Key)
	})
	t.Run("seek", func(t *testing.T) {
		require.Contains(t, r.ok(t, "", "sub", "seek", "feed", "s", "--to", "earliest"), "moved subscription feed/s")
		out := r.ok(t, "", "sub", "receive", "feed", "s", "--wait", "5")
		require.Equal(t, "order.created", rows(out)[1][2], "redelivered after the seek")
	})
	t.Run("purge", func(t *testing.T) {
		require.Contains(t, r.ok(t, "", "sub", "purge", "feed", "s"), "purged subscription feed/s")
		var ds []struct{ State string }
		r.okJSON(t, &ds, "", "sub", "peek", "feed", "s")
		require.Empty(t, ds, "the delivery in flight is gone")
		_, errOut, code := r.run(t, "", "sub", "purge", "feed", "nope")
		require.Equal(t, 1, code)
		require.Contains(t, errOut, "404")
	})
	t.Run("delete", func(t *testing.T) {
		r.ok(t, "", "sub", "delete", "feed", "s")
		_, _, code := r.run(t, "", "sub", "get", "feed", "s")
		require.Equal(t, 1, code)
	})
}
