package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// testCLIGroup: group ls, describe and seek on a group a member polled.
func testCLIGroup(t *testing.T, r *cliRun) {
	r.ok(t, "", "topic", "create", "stream", "--partitions", "1")
	r.ok(t, "a\nb\nc\n", "topic", "publish", "stream", "--type", "t")
	res := r.env.Do("POST", "/v1/topics/stream/groups/g/poll", map[string]any{"consumer": "w1", "start": "earliest"})
	require.Equal(t, 200, res.Status, "%s", res.Body)
	res = r.env.Do("POST", "/v1/topics/stream/groups/g/commit", map[string]any{"consumer": "w1", "generation": res.Map(t)["generation"], "offsets": map[string]int{"0": 0}})
	require.Equal(t, 204, res.Status, "%s", res.Body)
	t.Run("ls", func(t *testing.T) {
		require.Equal(t, []string{"g", "1", "1", "2"}, rows(r.ok(t, "", "group", "ls", "stream"))[1])
	})
	t.Run("describe", func(t *testing.T) {
		require.Equal(t, []string{"0", "w1", "0", "2", "2"}, rows(r.ok(t, "", "group", "describe", "stream", "g"))[1])
	})
	t.Run("seek", func(t *testing.T) {
		r.ok(t, "", "group", "seek", "stream", "g", "--offset", "0=2")
		var g struct {
			Partitions []struct {
				Committed int64 `json:"committed_offset"`
			}
		}
		r.okJSON(t, &g, "", "group", "describe", "stream", "g")
		require.EqualValues(t, 1, g.Partitions[0].Committed)
		require.Contains(t, r.ok(t, "", "group", "seek", "stream", "g", "--to", "earliest"), "moved group stream/g")
		r.okJSON(t, &g, "", "group", "describe", "stream", "g")
		require.EqualValues(t, -1, g.Partitions[0].Committed)
		_, _, code := r.run(t, "", "group", "seek", "stream", "g")
		require.Equal(t, 2, code, "seek needs --to or --offset")
	})
}

// testCLIKey: key create (its secret shown once, and working), ls, revoke
// (the key then refused).
func testCLIKey(t *testing.T, r *cliRun) {
	var k struct{ ID, Key string }
	t.Run("create", func(t *testing.T) {
		r.okJSON(t, &k, "", "key", "create", "sender", "--permission", "queue:in*=send,manage")
		require.True(t, strings.HasPrefix(k.Key, "ferry_sk_"), k.Key)
		r.ok(t, "", "queue", "create", "inbox", "--api-key", k.Key)
		_, errOut, code := r.run(t, "", "queue", "receive", "inbox", "--api-key", k.Key)
		require.Equal(t, 1, code)
		require.Contains(t, errOut, "403")
	})
	t.Run("ls", func(t *testing.T) {
		out := r.ok(t, "", "key", "ls")
		require.Contains(t, out, k.ID)
		require.Contains(t, out, "queue:in*=send,manage")
		require.NotContains(t, out, k.Key, "never the secret")
	})
	t.Run("revoke", func(t *testing.T) {
		require.Contains(t, r.ok(t, "", "key", "revoke", k.ID), "revoked key "+k.ID)
		_, errOut, code := r.run(t, "", "queue", "get", "inbox", "--api-key", k.Key)
		require.Equal(t, 1, code)
		require.Contains(t, errOut, "401")
	})
}
