package main

import (
	"bufio"
	"encoding/json"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testCLITopic: topic create, ls, get, publish (an argument, stdin data,
// stdin events), tail (without and with follow), delete.
func testCLITopic(t *testing.T, r *cliRun) {
	t.Run("create", func(t *testing.T) {
		out := r.ok(t, "", "topic", "create", "events", "--partitions", "2")
		require.Equal(t, [][]string{{"PARTITION", "OLDEST_OFFSET", "HEAD_OFFSET"}, {"0", "0", "-1"}, {"1", "0", "-1"}}, rows(out))
	})
	t.Run("publish", func(t *testing.T) {
		var pub []struct {
			ID        string
			Partition int
			Offset    int64
			Duplicate bool
		}
		r.okJSON(t, &pub, "", "topic", "publish", "events", `{"amount": 5}`, "--type", "paid", "--key", "k1", "--id", "e1")
		require.Equal(t, "e1", pub[0].ID)
		part := pub[0].Partition
		r.okJSON(t, &pub, "1\n2\n", "topic", "publish", "events", "--type", "n", "--key", "k1")
		require.Len(t, pub, 2)
		require.Equal(t, []int64{1, 2}, []int64{pub[0].Offset, pub[1].Offset}, "same key, same partition, in order")
		out := r.ok(t, `{"type": "whole", "key": "k1", "id": "e1"}`+"\n", "topic", "publish", "events")
		require.Equal(t, []string{"e1", strconv.Itoa(part), "0", "true"}, rows(out)[1], "a line without --type is a whole event; e1 again is a duplicate")
		_, errOut, code := r.run(t, "not an event\n", "topic", "publish", "events")
		require.Equal(t, 2, code, errOut)
	})
	t.Run("ls", func(t *testing.T) {
		require.Equal(t, []string{"events", "2", "604800", "3"}, rows(r.ok(t, "", "topic", "ls"))[1])
	})
	t.Run("get", func(t *testing.T) {
		var tp struct {
			Offsets []struct {
				HeadOffset int64 `json:"head_offset"`
			}
		}
		r.okJSON(t, &tp, "", "topic", "get", "events")
		require.Len(t, tp.Offsets, 2)
		require.EqualValues(t, 2, tp.Offsets[0].HeadOffset+tp.Offsets[1].HeadOffset+1)
	})
	t.Run("tail", func(t *testing.T) {
		out := r.ok(t, "", "topic", "tail", "events", "-n", "2", "--follow=false")
		lines := rows(out)
		require.Len(t, lines, 3, "a header and the last two events: %s", out)
		require.Equal(t, []string{"1", "e"}, []string{lines[1][1], lines[1][2][:1]})
		testCLITail(t, r)
	})
	t.Run("delete", func(t *testing.T) {
		require.Contains(t, r.ok(t, "", "topic", "delete", "events"), "deleted topic events")
		_, _, code := r.run(t, "", "topic", "get", "events")
		require.Equal(t, 1, code)
	})
}

// testCLITail: tail follows like tail -f: an event published while it runs
// is printed, and Ctrl-C ends it with exit code 0.
func testCLITail(t *testing.T, r *cliRun) {
	cmd := r.command("", "topic", "tail", "events", "-n", "0", "--output", "json")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen bool
	for deadline := time.After(30 * time.Second); !seen; {
		// Published until tail shows it: tail may not have read the
		// offsets yet when the first publish lands.
		res := r.env.Do("POST", "/v1/topics/events/events", map[string]any{"events": []any{map[string]any{"type": "live", "data": "x"}}})
		require.Equal(t, 201, res.Status, "%s", res.Body)
		select {
		case l := <-lines:
			var e struct{ Type string }
			require.NoError(t, json.Unmarshal([]byte(l), &e), l)
			require.Equal(t, "live", e.Type)
			seen = true
		case <-time.After(time.Second):
		case <-deadline:
			t.Fatal("tail printed nothing")
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	for range lines { // the rest, until it exits
	}
	require.NoError(t, cmd.Wait(), "Ctrl-C ends a follow with exit code 0")
}
