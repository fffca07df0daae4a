package handlers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// gleave makes consumer leave group and requires a 204 with no body.
func gleave(t testing.TB, env *ferrytest.Env, topic, group, consumer string) {
	t.Helper()
	requireNoContent(t, env.Do("POST", gpath(topic, group, "/leave"), map[string]any{"consumer": consumer}), "leave "+consumer)
}

// TestGroupLeave: members a (server 1) and b (server 2) share a topic; b
// waits in a long poll; a leaves. b's poll returns at once (woken through
// NOTIFY), and b's next poll owns every partition in a new generation,
// with a's uncommitted events from committed + 1. a's commits are fenced;
// leaving again, or as a stranger, is a 204 that changes nothing; a poll
// of a rejoins it as a new member.
func TestGroupLeave(t *testing.T) {
	t.Parallel()
	_, envs := pollingServers(t, "ferry-l1", "ferry-l2")
	s1, s2 := envs[0], envs[1]
	putTopic(t, s1, "lv", map[string]any{"partitions": 4}, http.StatusCreated)
	publishTo(t, s1, "lv", 4, 2, 0, 1, 2, 3)

	gpoll(t, s1, "lv", "g", "a", map[string]any{"start": "earliest"})
	b := gpoll(t, s2, "lv", "g", "b", nil)
	a := gpoll(t, s1, "lv", "g", "a", nil)
	require.Equal(t, a.Generation, b.Generation)
	require.Len(t, a.Partitions, 2)
	// b read its two partitions and committed them; a committed one of
	// its events (it read both partitions in its first poll).
	gcommitOK(t, s2, "lv", "g", "b", b.Generation, lastOffsets(b.Events))
	gcommitOK(t, s1, "lv", "g", "a", a.Generation, map[int]int64{a.Partitions[0]: 0})

	done := startParked(t, s2, func() asyncResult {
		_, res, _ := gpollAsync(s2, "lv", "g", "b", map[string]any{"wait_seconds": 10})
		return res
	})
	left := time.Now()
	gleave(t, s1, "lv", "g", "a")
	res := <-done
	requireOK(t, res)
	t.Logf("b's long poll returned %v after a's leave", time.Since(left))
	require.Less(t, time.Since(left), 5*time.Second, "the leave must end b's 10 s wait (through NOTIFY)")

	b2 := gpoll(t, s2, "lv", "g", "b", nil)
	require.Greater(t, b2.Generation, a.Generation)
	require.Equal(t, allPartitions(4), b2.Partitions)
	got := byPartition(b2.Events)
	require.Equal(t, []int64{1}, got[a.Partitions[0]], "committed 0: redelivered from 1")
	require.Equal(t, []int64{0, 1}, got[a.Partitions[1]], "nothing committed: redelivered from 0")
	for _, p := range b.Partitions {
		require.Empty(t, got[p], "b's own partitions go on where b was")
	}
	g := gdescribe(t, s1, "lv", "g")
	require.Len(t, g.Members, 1)
	require.Equal(t, "b", g.Members[0].Consumer)

	// The leaver is fenced.
	gfenced(t, s1, "lv", "g", "a", a.Generation, map[int]int64{a.Partitions[0]: 1})
	gfenced(t, s1, "lv", "g", "a", b2.Generation, map[int]int64{a.Partitions[0]: 1})

	// Idempotent: again, and a consumer that never joined; nothing moves.
	gleave(t, s1, "lv", "g", "a")
	gleave(t, s2, "lv", "g", "never-joined")
	after := gdescribe(t, s1, "lv", "g")
	require.Equal(t, g.Generation, after.Generation)
	require.Equal(t, owners(g), owners(after))
	require.Equal(t, committed(g), committed(after))

	// A poll of the leaver rejoins it, in a new generation.
	a2 := gpoll(t, s1, "lv", "g", "a", nil)
	require.Greater(t, a2.Generation, b2.Generation)
	require.Len(t, a2.Partitions, 2)
	require.Len(t, gdescribe(t, s2, "lv", "g").Members, 2)
}

// TestGroupLeaveLastMember: when the only member leaves, no partition has
// an owner; the next member to poll gets them all from committed + 1.
func TestGroupLeaveLastMember(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	a := pollFour(t, env, "solo")
	gcommitOK(t, env, "solo", "g", "a", a.Generation, map[int]int64{0: 1})
	gleave(t, env, "solo", "g", "a")
	g := gdescribe(t, env, "solo", "g")
	require.Empty(t, g.Members)
	for _, p := range g.Partitions {
		require.Nil(t, p.Owner, "partition %d", p.Partition)
	}
	require.Greater(t, g.Generation, a.Generation)
	c := gpoll(t, env, "solo", "g", "c", nil)
	require.Equal(t, []int{0, 1}, c.Partitions)
	require.Equal(t, map[int][]int64{1: {0, 1}}, byPartition(c.Events), "partition 0 was committed; 1 is read again")
}
