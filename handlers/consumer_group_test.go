package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// The consumer group shapes are the client's (client.Polled,
// client.Group, ...); the key lists below are for the raw answers.

var (
	groupPollKeys      = []string{"generation", "partitions", "events"}
	groupKeys          = []string{"name", "topic", "generation", "created_at", "members", "partitions"}
	groupMemberKeys    = []string{"consumer", "partitions", "last_seen", "session_timeout_seconds"}
	groupPartitionKeys = []string{"partition", "committed_offset", "head_offset", "lag", "owner", "expired_skipped"}
)

func gpath(topic, group string, rest ...string) string {
	return tpath(topic, "/groups/"+url.PathEscape(group)) + strings.Join(rest, "")
}

// decodeGroupPoll checks a raw poll answer's shape and its invariants
// (checkPoll).
func decodeGroupPoll(body []byte) (client.Polled, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return client.Polled{}, fmt.Errorf("poll answer: %w: %s", err, body)
	}
	if err := checkKeys(m, groupPollKeys); err != nil {
		return client.Polled{}, fmt.Errorf("poll answer: %w: %s", err, body)
	}
	for _, k := range []string{"partitions", "events"} {
		if _, ok := m[k].([]any); !ok {
			return client.Polled{}, fmt.Errorf("poll answer: %s must be an array, never null: %s", k, body)
		}
	}
	for _, e := range m["events"].([]any) {
		if err := checkKeys(e.(map[string]any), eventKeys); err != nil {
			return client.Polled{}, fmt.Errorf("poll event: %w: %s", err, body)
		}
	}
	var out client.Polled
	if err := json.Unmarshal(body, &out); err != nil {
		return out, err
	}
	return out, checkPoll(out)
}

// checkPoll checks a poll answer's invariants: the events belong to the
// member's partitions, each partition's in strictly increasing offset order.
func checkPoll(out client.Polled) error {
	if out.Partitions == nil || out.Events == nil {
		return fmt.Errorf("poll answer: partitions and events are arrays, never null: %+v", out)
	}
	if !slices.IsSorted(out.Partitions) {
		return fmt.Errorf("poll answer: partitions not ascending: %v", out.Partitions)
	}
	last := map[int]int64{}
	for _, e := range out.Events {
		if !slices.Contains(out.Partitions, e.Partition) {
			return fmt.Errorf("poll answer: event of partition %d, not one of the member's %v", e.Partition, out.Partitions)
		}
		if prev, ok := last[e.Partition]; ok && e.Offset <= prev {
			return fmt.Errorf("poll answer: partition %d: offset %d after %d", e.Partition, e.Offset, prev)
		}
		last[e.Partition] = e.Offset
	}
	return nil
}

func checkKeys(obj map[string]any, keys []string) error {
	got := make([]string, 0, len(obj))
	for k := range obj {
		got = append(got, k)
	}
	sort.Strings(got)
	want := slices.Clone(keys)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("members %v, want %v", got, want)
	}
	return nil
}

// gpoll polls as consumer (req may add fields) and checks the answer's
// invariants (checkPoll).
func gpoll(t testing.TB, env *ferrytest.Env, topic, group, consumer string, req map[string]any) client.Polled {
	t.Helper()
	body := map[string]any{"consumer": consumer}
	maps.Copy(body, req)
	out, err := api(env).PollGroup(t.Context(), topic, group, typed[client.Poll](t, body))
	require.NoError(t, err, "poll %s", consumer)
	require.NoError(t, checkPoll(*out))
	return *out
}

// gpollAsync polls without require, for goroutines.
func gpollAsync(env *ferrytest.Env, topic, group, consumer string, req map[string]any) (client.Polled, asyncResult, error) {
	body := map[string]any{"consumer": consumer}
	for k, v := range req {
		body[k] = v
	}
	res := doAsync(env, "POST", gpath(topic, group, "/poll"), body)
	if res.err != nil {
		return client.Polled{}, res, res.err
	}
	if res.status != http.StatusOK {
		return client.Polled{}, res, fmt.Errorf("poll %s: status %d: %s", consumer, res.status, res.body)
	}
	out, err := decodeGroupPoll(res.body)
	return out, res, err
}

func offsetsBody(offsets map[int]int64) map[string]int64 {
	out := make(map[string]int64, len(offsets))
	for p, o := range offsets {
		out[fmt.Sprint(p)] = o
	}
	return out
}

// gcommit commits and returns the answer (204, or a problem).
func gcommit(t testing.TB, env *ferrytest.Env, topic, group, consumer string, gen int64, offsets map[int]int64) ferrytest.Response {
	t.Helper()
	return env.Do("POST", gpath(topic, group, "/commit"),
		map[string]any{"consumer": consumer, "generation": gen, "offsets": offsetsBody(offsets)})
}

func gcommitOK(t testing.TB, env *ferrytest.Env, topic, group, consumer string, gen int64, offsets map[int]int64) {
	t.Helper()
	require.NoError(t, api(env).CommitGroup(t.Context(), topic, group, consumer, gen, offsets), "commit %s gen %d %v", consumer, gen, offsets)
}

func gfenced(t testing.TB, env *ferrytest.Env, topic, group, consumer string, gen int64, offsets map[int]int64) {
	t.Helper()
	requireProblem(t, gcommit(t, env, topic, group, consumer, gen, offsets), http.StatusConflict, "conflict")
}

// requireGroupKeys checks the members of a raw group object.
func requireGroupKeys(t testing.TB, obj map[string]any) {
	t.Helper()
	requireKeys(t, obj, groupKeys, "group")
	requireArray(t, obj, "members", func(t testing.TB, m map[string]any) {
		t.Helper()
		requireKeys(t, m, groupMemberKeys, "group member")
		requireArray(t, m, "partitions", nil)
	})
	requireArray(t, obj, "partitions", keysOf(groupPartitionKeys, "group partition"))
}

// gdescribe GETs the group and checks its shape and consistency: members'
// partitions are disjoint, agree with the owners, and lag is exact.
func gdescribe(t testing.TB, env *ferrytest.Env, topic, group string) client.Group {
	t.Helper()
	got, err := api(env).GetGroup(t.Context(), topic, group)
	require.NoError(t, err, "describe %s/%s", topic, group)
	g := *got
	require.NotNil(t, g.Members)
	require.NotNil(t, g.Partitions)
	require.Equal(t, group, g.Name)
	require.Equal(t, topic, g.Topic)
	owner := map[int]string{}
	for _, m := range g.Members {
		require.True(t, slices.IsSorted(m.Partitions), "member partitions ascending: %v", m.Partitions)
		for _, p := range m.Partitions {
			other, dup := owner[p]
			require.False(t, dup, "partition %d in the lists of %s and %s", p, other, m.Consumer)
			owner[p] = m.Consumer
		}
	}
	for i, p := range g.Partitions {
		require.Equal(t, i, p.Partition, "partitions in order")
		require.Equal(t, max(0, p.HeadOffset-p.CommittedOffset), p.Lag, "lag of partition %d", i)
		if o, ok := owner[p.Partition]; ok {
			require.NotNil(t, p.Owner, "partition %d has a member but no owner", i)
			require.Equal(t, o, *p.Owner, "owner of partition %d", i)
		} else if len(g.Members) > 0 {
			require.Nil(t, p.Owner, "partition %d owned by %v, not a member", i, p.Owner)
		}
	}
	return g
}

func gseek(t testing.TB, env *ferrytest.Env, topic, group string, body map[string]any) {
	t.Helper()
	require.NoError(t, api(env).SeekGroup(t.Context(), topic, group, typed[client.GroupSeek](t, body)), "seek %v", body)
}

// committed is the describe's committed offset per partition.
func committed(g client.Group) []int64 {
	return pluck(g.Partitions, func(p client.GroupPartition) int64 { return p.CommittedOffset })
}

// owners maps each owned partition to its member.
func owners(g client.Group) map[int]string {
	out := map[int]string{}
	for _, m := range g.Members {
		for _, p := range m.Partitions {
			out[p] = m.Consumer
		}
	}
	return out
}

// byPartition groups the events' offsets by partition.
func byPartition(evs []client.Event) map[int][]int64 {
	out := map[int][]int64{}
	for _, e := range evs {
		out[e.Partition] = append(out[e.Partition], e.Offset)
	}
	return out
}

// lastOffsets is the last offset of each partition among the events.
func lastOffsets(evs []client.Event) map[int]int64 {
	out := map[int]int64{}
	for _, e := range evs {
		out[e.Partition] = max(out[e.Partition], e.Offset)
	}
	return out
}

// publishTo publishes n events to each of the given partitions (of a topic
// with parts partitions), in one batch.
func publishTo(t testing.TB, env *ferrytest.Env, topic string, parts, n int, to ...int) []client.Published {
	t.Helper()
	var evs []map[string]any
	for _, p := range to {
		for range n {
			evs = append(evs, evt("t", "key", keyFor(t, p, parts)))
		}
	}
	return publishEvents(t, env, topic, evs...)
}

// pollFour makes topic with two partitions of two events each, and member
// a of group g read all four from the earliest.
func pollFour(t testing.TB, env *ferrytest.Env, topic string) client.Polled {
	t.Helper()
	putTopic(t, env, topic, map[string]any{"partitions": 2}, http.StatusCreated)
	publishTo(t, env, topic, 2, 2, 0, 1)
	a := gpoll(t, env, topic, "g", "a", map[string]any{"start": "earliest"})
	require.Len(t, a.Events, 4)
	return a
}

func allPartitions(n int) []int { return between(0, n-1) }

// TestGroupSingleMember: one member gets every partition, reads from the
// earliest event in offset order, commits, and its fetch position moves
// on with every poll whether or not it commits.
func TestGroupSingleMember(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "log", nil, http.StatusCreated)
	publishTo(t, env, "log", 4, 3, 0, 1, 2, 3)

	r := gpoll(t, env, "log", "g", "a", map[string]any{"start": "earliest"})
	require.EqualValues(t, 1, r.Generation, "joining the new group is its first assignment")
	require.Equal(t, allPartitions(4), r.Partitions)
	require.Len(t, r.Events, 12)
	got := byPartition(r.Events)
	for p := range 4 {
		require.Equal(t, offsetRange(0, 2), got[p], "partition %d", p)
		// The same events as the log holds.
		page := readEvents(t, env, "log", fmt.Sprintf("?partition=%d", p))
		var mine []client.Event
		for _, e := range r.Events {
			if e.Partition == p {
				mine = append(mine, e)
			}
		}
		require.Len(t, mine, len(page.Events))
		for i := range mine {
			requireSameEvent(t, page.Events[i], mine[i], "polled event")
		}
	}

	g := gdescribe(t, env, "log", "g")
	require.EqualValues(t, 1, g.Generation)
	require.WithinDuration(t, time.Now(), g.CreatedAt, time.Minute)
	require.Len(t, g.Members, 1)
	require.Equal(t, "a", g.Members[0].Consumer)
	require.Equal(t, allPartitions(4), g.Members[0].Partitions)
	require.Equal(t, 30, g.Members[0].SessionTimeoutSeconds, "the default session timeout")
	require.WithinDuration(t, time.Now(), g.Members[0].LastSeen, time.Minute)
	a := "a"
	for p := range 4 {
		require.Equal(t, client.GroupPartition{Partition: p, CommittedOffset: -1, HeadOffset: 2, Lag: 3, Owner: &a}, g.Partitions[p])
	}

	gcommitOK(t, env, "log", "g", "a", r.Generation, lastOffsets(r.Events))
	g = gdescribe(t, env, "log", "g")
	for p := range 4 {
		require.Equal(t, client.GroupPartition{Partition: p, CommittedOffset: 2, HeadOffset: 2, Lag: 0, Owner: &a}, g.Partitions[p])
	}

	// Nothing new: an empty poll, same generation.
	r = gpoll(t, env, "log", "g", "a", nil)
	require.EqualValues(t, 1, r.Generation)
	require.Empty(t, r.Events)

	// New events only; the fetch position advances without a commit.
	publishTo(t, env, "log", 4, 1, 0, 1, 2, 3)
	r = gpoll(t, env, "log", "g", "a", nil)
	require.Equal(t, map[int][]int64{0: {3}, 1: {3}, 2: {3}, 3: {3}}, byPartition(r.Events))
	require.Empty(t, gpoll(t, env, "log", "g", "a", nil).Events, "read, not committed: not returned again to the same member")
	require.Equal(t, []int64{2, 2, 2, 2}, committed(gdescribe(t, env, "log", "g")))
	require.EqualValues(t, 1, gdescribe(t, env, "log", "g").Partitions[0].Lag)

	// max_events, in offset order across polls.
	publishTo(t, env, "log", 4, 5, 0)
	r = gpoll(t, env, "log", "g", "a", map[string]any{"max_events": 2})
	require.Equal(t, map[int][]int64{0: {4, 5}}, byPartition(r.Events))
	r = gpoll(t, env, "log", "g", "a", map[string]any{"max_events": 1000})
	require.Equal(t, map[int][]int64{0: {6, 7, 8}}, byPartition(r.Events))

	// Commits only move forward.
	gcommitOK(t, env, "log", "g", "a", r.Generation, map[int]int64{0: 8, 1: 3})
	gcommitOK(t, env, "log", "g", "a", r.Generation, map[int]int64{0: 1})
	g = gdescribe(t, env, "log", "g")
	require.Equal(t, []int64{8, 3, 2, 2}, committed(g))
	require.Equal(t, []int64{0, 0, 1, 1}, []int64{g.Partitions[0].Lag, g.Partitions[1].Lag, g.Partitions[2].Lag, g.Partitions[3].Lag})

	// The list holds the group, described the same way.
	lr := env.Do("GET", tpath("log", "/groups"), nil)
	require.Equal(t, http.StatusOK, lr.Status, "%s", lr.Body)
	lm := lr.Map(t)
	requireKeys(t, lm, []string{"groups", "next"}, "group list")
	for _, x := range lm["groups"].([]any) {
		requireGroupKeys(t, x.(map[string]any))
	}
	var list struct {
		Groups []client.Group `json:"groups"`
	}
	lr.JSON(t, &list)
	require.Len(t, list.Groups, 1)
	list.Groups[0].Members[0].LastSeen = g.Members[0].LastSeen
	require.Equal(t, g, list.Groups[0])

	// Another group of the topic reads independently.
	other := gpoll(t, env, "log", "other", "a", map[string]any{"start": "earliest", "max_events": 1000})
	require.Len(t, other.Events, 21)
	lr = env.Do("GET", tpath("log", "/groups"), nil)
	lr.JSON(t, &list)
	require.Equal(t, []string{"g", "other"}, []string{list.Groups[0].Name, list.Groups[1].Name}, "sorted by name")
}

// TestGroupStartLatest: without start a new group begins after the events
// published so far; start is ignored for an existing group.
func TestGroupStartLatest(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "latest", map[string]any{"partitions": 2}, http.StatusCreated)
	publishTo(t, env, "latest", 2, 2, 0, 1)

	r := gpoll(t, env, "latest", "g", "a", nil)
	require.Equal(t, []int{0, 1}, r.Partitions)
	require.Empty(t, r.Events, "events published before the group are not returned")
	g := gdescribe(t, env, "latest", "g")
	require.Equal(t, []int64{1, 1}, committed(g), "a new group starts at the head")
	require.Equal(t, []int64{0, 0}, []int64{g.Partitions[0].Lag, g.Partitions[1].Lag})

	publishTo(t, env, "latest", 2, 1, 0, 1)
	r = gpoll(t, env, "latest", "g", "a", map[string]any{"start": "earliest"})
	require.Equal(t, map[int][]int64{0: {2}, 1: {2}}, byPartition(r.Events), "start is ignored for an existing group")

	// "latest" spelled out is the same.
	r = gpoll(t, env, "latest", "g2", "a", map[string]any{"start": "latest"})
	require.Empty(t, r.Events)
	require.Equal(t, []int64{2, 2}, committed(gdescribe(t, env, "latest", "g2")))
}

// TestGroupStartTime: a group created with start = a time begins, per
// partition, at the first event published at or after it.
func TestGroupStartTime(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "when", map[string]any{"partitions": 4}, http.StatusCreated)
	// Three publishes, each its own transaction and time.
	publishTo(t, env, "when", 4, 2, 0, 1)
	mid := publishTo(t, env, "when", 4, 1, 0, 2)
	publishTo(t, env, "when", 4, 1, 0, 1, 2, 3)

	logs := map[int][]client.Event{}
	var at time.Time
	for p := range 4 {
		logs[p] = readEvents(t, env, "when", fmt.Sprintf("?partition=%d", p)).Events
		for _, e := range logs[p] {
			if e.ID == mid[0].ID {
				at = e.PublishedAt
			}
		}
	}
	require.False(t, at.IsZero())
	want := map[int][]int64{}
	for p, evs := range logs {
		for _, e := range evs {
			if !e.PublishedAt.Before(at) {
				want[p] = append(want[p], e.Offset)
			}
		}
	}
	require.Equal(t, map[int][]int64{0: {2, 3}, 1: {2}, 2: {0, 1}, 3: {0}}, want, "the log as published")

	r := gpoll(t, env, "when", "g", "a", map[string]any{"start": at.Format(time.RFC3339Nano)})
	require.Equal(t, want, byPartition(r.Events), "from the first event at or after %s (inclusive)", at)
	require.Equal(t, []int64{1, 1, -1, -1}, committed(gdescribe(t, env, "when", "g")))

	// A time after every event: nothing until new events.
	r = gpoll(t, env, "when", "future", "a", map[string]any{"start": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	require.Empty(t, r.Events)
	require.Equal(t, []int64{3, 2, 1, 0}, committed(gdescribe(t, env, "when", "future")))
	publishTo(t, env, "when", 4, 1, 3)
	require.Equal(t, map[int][]int64{3: {1}}, byPartition(gpoll(t, env, "when", "future", "a", nil).Events))
}

// TestGroupSpreadAndSticky: partitions are spread evenly over members, a
// partition is in one member's list at a time, each join bumps the
// generation, and a join moves only the partitions the newcomer gets.
func TestGroupSpreadAndSticky(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "spread", map[string]any{"partitions": 4}, http.StatusCreated)

	// (generation, partition) → consumer, over every poll answer.
	claims := map[[2]int64]string{}
	poll := func(c string) client.Polled {
		t.Helper()
		r := gpoll(t, env, "spread", "g", c, nil)
		for _, p := range r.Partitions {
			k := [2]int64{r.Generation, int64(p)}
			if other, ok := claims[k]; ok {
				require.Equal(t, other, c, "generation %d: partition %d given to %s and %s", r.Generation, p, other, c)
			}
			claims[k] = c
		}
		return r
	}
	sizes := func(g client.Group) []int {
		var out []int
		for _, m := range g.Members {
			out = append(out, len(m.Partitions))
		}
		sort.Sort(sort.Reverse(sort.IntSlice(out)))
		return out
	}

	a := poll("a")
	require.Equal(t, allPartitions(4), a.Partitions)
	gen1 := a.Generation

	b := poll("b")
	require.Greater(t, b.Generation, gen1, "a join bumps the generation")
	require.Len(t, b.Partitions, 2)
	g := gdescribe(t, env, "spread", "g")
	require.Equal(t, b.Generation, g.Generation)
	require.Equal(t, []int{2, 2}, sizes(g))
	a = poll("a")
	require.Equal(t, b.Generation, a.Generation, "a sees the new generation")
	require.Len(t, a.Partitions, 2)
	require.ElementsMatch(t, allPartitions(4), append(slices.Clone(a.Partitions), b.Partitions...))
	before := owners(g)

	c := poll("c")
	require.Greater(t, c.Generation, b.Generation)
	require.Len(t, c.Partitions, 1)
	g = gdescribe(t, env, "spread", "g")
	require.Equal(t, []int{2, 1, 1}, sizes(g))
	after := owners(g)
	var moved []int
	for p := range 4 {
		if before[p] != after[p] {
			moved = append(moved, p)
		}
	}
	require.Equal(t, c.Partitions, moved, "only the newcomer's partition changed owner (sticky)")
	for _, x := range []string{"a", "b"} {
		r := poll(x)
		require.Equal(t, c.Generation, r.Generation)
		for _, p := range r.Partitions {
			require.Equal(t, x, after[p])
		}
	}

	// A fourth member: one each; a fifth gets none (and is told so).
	d := poll("d")
	require.Len(t, d.Partitions, 1)
	require.Equal(t, []int{1, 1, 1, 1}, sizes(gdescribe(t, env, "spread", "g")))
	gen4 := d.Generation
	e := poll("e")
	require.Empty(t, e.Partitions)
	require.Empty(t, e.Events)
	require.Equal(t, gen4, e.Generation, "a join that moves nothing keeps the generation")
	// An idle member's long poll waits (it does not spin).
	_, idle, err := gpollAsync(env, "spread", "g", "e", map[string]any{"wait_seconds": 1})
	require.NoError(t, err)
	require.GreaterOrEqual(t, idle.took, 900*time.Millisecond, "a member without partitions waits out its wait_seconds")
	g = gdescribe(t, env, "spread", "g")
	require.Len(t, g.Members, 5)
	require.Equal(t, []int{1, 1, 1, 1, 0}, sizes(g))
}

// TestGroupEvictionRedelivery: a member that stops polling is evicted
// within its session timeout, without operator action; its partitions go
// to the remaining member, which resumes after the committed offsets
// (the uncommitted events again, nothing skipped). The evicted member's
// late commit is fenced.
func TestGroupEvictionRedelivery(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "evict", map[string]any{"partitions": 4}, http.StatusCreated)
	session := map[string]any{"session_timeout_seconds": 5}

	gpoll(t, env, "evict", "g", "a", session)
	b := gpoll(t, env, "evict", "g", "b", session)
	require.Len(t, b.Partitions, 2)
	a := gpoll(t, env, "evict", "g", "a", session)
	require.Equal(t, b.Generation, a.Generation)
	require.Len(t, a.Partitions, 2)
	require.EqualValues(t, 5, gdescribe(t, env, "evict", "g").Members[0].SessionTimeoutSeconds)

	publishTo(t, env, "evict", 4, 10, 0, 1, 2, 3)
	a = gpoll(t, env, "evict", "g", "a", session)
	b = gpoll(t, env, "evict", "g", "b", session)
	require.Len(t, a.Events, 20)
	require.Len(t, b.Events, 20)
	gcommitOK(t, env, "evict", "g", "a", a.Generation, lastOffsets(a.Events))
	pb0, pb1 := b.Partitions[0], b.Partitions[1]
	gcommitOK(t, env, "evict", "g", "b", b.Generation, map[int]int64{pb0: 3, pb1: 5})
	stoppedAt := time.Now()

	// b stops. a keeps polling and gets b's partitions once b's session
	// has timed out.
	var got []client.Event
	deadline := time.Now().Add(15 * time.Second)
	for {
		a = gpoll(t, env, "evict", "g", "a", map[string]any{"session_timeout_seconds": 5, "wait_seconds": 1})
		got = append(got, a.Events...)
		if len(a.Partitions) == 4 {
			break
		}
		require.True(t, time.Now().Before(deadline), "b was not evicted within 15 s")
	}
	took := time.Since(stoppedAt)
	require.GreaterOrEqual(t, took, 4*time.Second, "evicted before its session timed out")
	require.Greater(t, a.Generation, b.Generation)
	require.Equal(t, map[int][]int64{pb0: offsetRange(4, 9), pb1: offsetRange(6, 9)}, byPartition(got),
		"b's uncommitted events again, from its committed offsets + 1; nothing of a's own")
	g := gdescribe(t, env, "evict", "g")
	require.Len(t, g.Members, 1)
	require.Equal(t, allPartitions(4), g.Members[0].Partitions)

	// b's late commit with its old generation is fenced and changes nothing.
	gfenced(t, env, "evict", "g", "b", b.Generation, map[int]int64{pb0: 9, pb1: 9})
	g = gdescribe(t, env, "evict", "g")
	for p := range 4 {
		want := int64(9)
		switch p {
		case pb0:
			want = 3
		case pb1:
			want = 5
		}
		require.Equal(t, want, g.Partitions[p].CommittedOffset, "partition %d", p)
	}
	gcommitOK(t, env, "evict", "g", "a", a.Generation, lastOffsets(got))
	require.Equal(t, []int64{9, 9, 9, 9}, committed(gdescribe(t, env, "evict", "g")))

	// b comes back: a new member, from the committed offsets (nothing left).
	b2 := gpoll(t, env, "evict", "g", "b", session)
	require.Greater(t, b2.Generation, a.Generation)
	require.Len(t, b2.Partitions, 2)
	require.Empty(t, b2.Events)

	m, _ := metrics(t, env)
	require.GreaterOrEqual(t, m[`ferry_consumer_group_evictions_total{group="g",topic="evict"}`], 1.0)
}

// TestGroupZombieCommit: a member that lost a partition cannot commit it
// with its old generation; partitions it kept stay committable; a
// generation from the future is refused; all or nothing.
func TestGroupZombieCommit(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "zombie", map[string]any{"partitions": 4}, http.StatusCreated)
	publishTo(t, env, "zombie", 4, 2, 0, 1, 2, 3)

	a := gpoll(t, env, "zombie", "g", "a", map[string]any{"start": "earliest"})
	require.Len(t, a.Events, 8)
	b := gpoll(t, env, "zombie", "g", "b", nil)
	require.Greater(t, b.Generation, a.Generation)
	require.Len(t, b.Partitions, 2)
	pb := b.Partitions[0]
	var pa []int
	for _, p := range allPartitions(4) {
		if !slices.Contains(b.Partitions, p) {
			pa = append(pa, p)
		}
	}
	require.Len(t, pa, 2)
	require.Equal(t, []int64{0, 1}, byPartition(b.Events)[pb], "b starts at committed + 1 of its partitions")

	gfenced(t, env, "zombie", "g", "a", a.Generation, map[int]int64{pb: 1})
	gcommitOK(t, env, "zombie", "g", "a", a.Generation, map[int]int64{pa[0]: 1})
	gfenced(t, env, "zombie", "g", "a", a.Generation, map[int]int64{pa[1]: 1, pb: 1}) // all or nothing
	gfenced(t, env, "zombie", "g", "a", b.Generation+1, map[int]int64{pa[0]: 1})      // from the future
	gfenced(t, env, "zombie", "g", "b", a.Generation, map[int]int64{pb: 1})           // b got pb after a.Generation
	gfenced(t, env, "zombie", "g", "stranger", b.Generation, map[int]int64{pb: 1})    // not a member
	gfenced(t, env, "zombie", "g", "a", b.Generation, map[int]int64{pb: 1})           // a's current generation, b's partition
	g := gdescribe(t, env, "zombie", "g")
	require.EqualValues(t, 1, g.Partitions[pa[0]].CommittedOffset)
	require.EqualValues(t, -1, g.Partitions[pa[1]].CommittedOffset, "a refused commit commits nothing")
	require.EqualValues(t, -1, g.Partitions[pb].CommittedOffset)
	require.Len(t, g.Members, 2, "a commit does not join")

	gcommitOK(t, env, "zombie", "g", "b", b.Generation, map[int]int64{pb: 1})
	gcommitOK(t, env, "zombie", "g", "a", b.Generation, map[int]int64{pa[1]: 0})
	g = gdescribe(t, env, "zombie", "g")
	require.EqualValues(t, 1, g.Partitions[pb].CommittedOffset)
	require.EqualValues(t, 0, g.Partitions[pa[1]].CommittedOffset)
	require.Equal(t, b.Generation, g.Generation, "commits do not change the generation")
}

// TestGroupConcurrentMembers: three members poll and commit concurrently
// while two publishers write. No partition is given to two members in one
// generation, each member reads a partition in increasing offsets within
// a generation, and every published event is received (nothing skipped).
func TestGroupConcurrentMembers(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	const parts, publishers, batches, perBatch = 4, 2, 15, 10
	const total = publishers * batches * perBatch
	putTopic(t, env, "busy", map[string]any{"partitions": parts}, http.StatusCreated)

	type claim struct {
		gen  int64
		part int
	}
	var (
		mu        sync.Mutex
		failures  []string
		owner     = map[claim]string{}           // (generation, partition) → consumer
		lastRead  = map[string]map[claim]int64{} // consumer → (generation, partition) → last offset
		received  = map[[2]int64]client.Event{}  // (partition, offset) → event
		published = map[[2]int64]string{}        // (partition, offset) → id
		fenced    int
		pubDone   sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(published) == total && len(received) == total
	}

	for w := range publishers {
		pubDone.Go(func() {
			for i := range batches {
				var evs []map[string]any
				for j := range perBatch {
					evs = append(evs, evt("t", "id", fmt.Sprintf("p%d-%d-%d", w, i, j)))
				}
				res := doAsync(env, "POST", tpath("busy", "/events"), map[string]any{"events": evs})
				if res.err != nil || res.status != http.StatusCreated {
					fail("publish: %v %d %s", res.err, res.status, res.body)
					return
				}
				var out struct {
					Events []client.Published `json:"events"`
				}
				if err := json.Unmarshal(res.body, &out); err != nil {
					fail("publish: %v", err)
					return
				}
				mu.Lock()
				for _, e := range out.Events {
					published[[2]int64{int64(e.Partition), e.Offset}] = e.ID
				}
				mu.Unlock()
			}
		})
	}

	var members sync.WaitGroup
	member := func(c string) {
		mu.Lock()
		lastRead[c] = map[claim]int64{}
		mu.Unlock()
		// At least one poll: every member joins.
		for first := true; first || (ctx.Err() == nil && !done()); first = false {
			r, res, err := gpollAsync(env, "busy", "g", c,
				map[string]any{"start": "earliest", "wait_seconds": 1, "max_events": 25})
			if err != nil {
				fail("%s: %v", c, err)
				return
			}
			mu.Lock()
			for _, p := range r.Partitions {
				k := claim{r.Generation, p}
				if o, ok := owner[k]; ok && o != c {
					failures = append(failures, fmt.Sprintf("generation %d: partition %d given to %s and %s", r.Generation, p, o, c))
				}
				owner[k] = c
			}
			for _, e := range r.Events {
				k := claim{r.Generation, e.Partition}
				if last, ok := lastRead[c][k]; ok && e.Offset <= last {
					failures = append(failures, fmt.Sprintf("%s: generation %d partition %d: offset %d after %d", c, r.Generation, e.Partition, e.Offset, last))
				}
				lastRead[c][k] = e.Offset
				received[[2]int64{int64(e.Partition), e.Offset}] = e
			}
			mu.Unlock()
			if len(r.Events) == 0 {
				continue
			}
			res = doAsync(env, "POST", gpath("busy", "g", "/commit"), map[string]any{
				"consumer": c, "generation": r.Generation, "offsets": offsetsBody(lastOffsets(r.Events)),
			})
			switch {
			case res.err != nil:
				fail("%s: commit: %v", c, res.err)
				return
			case res.status == http.StatusConflict: // rebalanced meanwhile: the new owner reads them again
				mu.Lock()
				fenced++
				mu.Unlock()
			case res.status != http.StatusNoContent:
				fail("%s: commit: %d %s", c, res.status, res.body)
				return
			}
		}
	}
	members.Go(func() { member("m1") })
	members.Go(func() { member("m2") })
	// The third joins mid-stream, while events are in flight.
	members.Go(func() {
		for ctx.Err() == nil {
			mu.Lock()
			n := len(received)
			mu.Unlock()
			if n >= total/4 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		member("m3")
	})
	pubDone.Wait()
	members.Wait()
	require.Empty(t, failures)
	require.True(t, done(), "every published event received in time: %d of %d", len(received), total)
	gens := map[int64]bool{}
	for k := range owner {
		gens[k.gen] = true
	}
	require.GreaterOrEqual(t, len(gens), 3, "the joins rebalanced")
	t.Logf("fenced commits: %d; generations: %d", fenced, len(gens))

	// Nothing skipped: every offset of every partition up to its head.
	tp := getTopic(t, env, "busy")
	n := 0
	for _, o := range tp.Offsets {
		for off := int64(0); off <= o.HeadOffset; off++ {
			k := [2]int64{int64(o.Partition), off}
			e, ok := received[k]
			require.True(t, ok, "partition %d offset %d never received", o.Partition, off)
			require.Equal(t, published[k], e.ID, "partition %d offset %d", o.Partition, off)
			n++
		}
	}
	require.Equal(t, total, n)

	// The three members share the partitions (2, 1, 1), and once they
	// have drained and committed, the lag is 0.
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, c := range []string{"m1", "m2", "m3"} {
			r := gpoll(t, env, "busy", "g", c, map[string]any{"max_events": 1000})
			if len(r.Events) > 0 {
				gcommitOK(t, env, "busy", "g", c, r.Generation, lastOffsets(r.Events))
			}
		}
		g := gdescribe(t, env, "busy", "g")
		lag := int64(0)
		for _, p := range g.Partitions {
			lag += p.Lag
		}
		if lag == 0 {
			require.Len(t, g.Members, 3)
			var sizes []int
			for _, m := range g.Members {
				sizes = append(sizes, len(m.Partitions))
			}
			require.ElementsMatch(t, []int{2, 1, 1}, sizes)
			break
		}
		require.True(t, time.Now().Before(deadline), "lag never reached 0: %+v", g.Partitions)
	}
}

// TestGroupTwoServers: members polling through two servers on one
// database form one group, and a long poll on one server is woken by a
// publish through the other (NOTIFY: both poll only every 30 s).
func TestGroupTwoServers(t *testing.T) {
	t.Parallel()
	_, envs := pollingServers(t, "ferry-g1", "ferry-g2")
	s1, s2 := envs[0], envs[1]
	putTopic(t, s1, "shared", map[string]any{"partitions": 4}, http.StatusCreated)

	gpoll(t, s1, "shared", "g", "a", nil)
	b := gpoll(t, s2, "shared", "g", "b", nil)
	a := gpoll(t, s1, "shared", "g", "a", nil)
	require.Equal(t, a.Generation, b.Generation)
	require.Len(t, a.Partitions, 2)
	require.Len(t, b.Partitions, 2)
	require.ElementsMatch(t, allPartitions(4), append(slices.Clone(a.Partitions), b.Partitions...))
	g1, g2 := gdescribe(t, s1, "shared", "g"), gdescribe(t, s2, "shared", "g")
	require.Equal(t, owners(g1), owners(g2))
	require.Equal(t, a.Generation, g2.Generation)

	done := parked(t, "group poll", s2, func() asyncResult {
		_, res, _ := gpollAsync(s2, "shared", "g", "b", map[string]any{"wait_seconds": 10})
		return res
	})
	// An event of a's partition wakes the poll, which finds nothing of b's
	// and waits on.
	publishTo(t, s1, "shared", 4, 1, a.Partitions[0])
	sent := publishTo(t, s1, "shared", 4, 1, b.Partitions[1])
	sentAt := time.Now()
	res := <-done
	requireOK(t, res)
	r, err := decodeGroupPoll(res.body)
	require.NoError(t, err)
	require.Len(t, r.Events, 1, "the long poll returned without b's event after %s", res.took)
	require.Equal(t, sent[0].ID, r.Events[0].ID)
	require.Less(t, time.Since(sentAt), 1500*time.Millisecond, "the wake-up must travel through NOTIFY, not a poll")

	// A commit through the other server.
	gcommitOK(t, s1, "shared", "g", "b", r.Generation, lastOffsets(r.Events))
	require.EqualValues(t, 0, gdescribe(t, s2, "shared", "g").Partitions[b.Partitions[1]].CommittedOffset)

	// The topic deleted and created again through server 1: server 2,
	// which has just used (and cached) the old topic, polls the new one.
	gpoll(t, s2, "shared", "g", "b", nil)
	require.Equal(t, http.StatusNoContent, s1.Do("DELETE", tpath("shared"), nil).Status)
	putTopic(t, s1, "shared", map[string]any{"partitions": 2}, http.StatusCreated)
	fresh := gpoll(t, s2, "shared", "g", "b", nil)
	require.Equal(t, []int{0, 1}, fresh.Partitions, "a new group of the new topic")
	require.EqualValues(t, 1, fresh.Generation)
}

// TestGroupSeek: seek moves the committed offsets and the members' fetch
// positions, to earliest, latest, a time or explicit offsets, and bumps
// the generation (fencing commits of what was read before).
func TestGroupSeek(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "seek", map[string]any{"partitions": 2}, http.StatusCreated)
	publishTo(t, env, "seek", 2, 4, 0, 1)
	second := publishTo(t, env, "seek", 2, 2, 0, 1)

	a := gpoll(t, env, "seek", "g", "a", map[string]any{"start": "earliest"})
	require.Equal(t, map[int][]int64{0: offsetRange(0, 5), 1: offsetRange(0, 5)}, byPartition(a.Events))
	gcommitOK(t, env, "seek", "g", "a", a.Generation, lastOffsets(a.Events))

	// earliest: everything again; the old generation is fenced.
	gseek(t, env, "seek", "g", map[string]any{"to": "earliest"})
	g := gdescribe(t, env, "seek", "g")
	require.Greater(t, g.Generation, a.Generation, "seek bumps the generation")
	require.Equal(t, []int64{-1, -1}, committed(g))
	require.Equal(t, allPartitions(2), g.Members[0].Partitions, "members keep their partitions")
	gfenced(t, env, "seek", "g", "a", a.Generation, map[int]int64{0: 5})
	r := gpoll(t, env, "seek", "g", "a", nil)
	require.Equal(t, g.Generation, r.Generation)
	require.Equal(t, map[int][]int64{0: offsetRange(0, 5), 1: offsetRange(0, 5)}, byPartition(r.Events))
	gcommitOK(t, env, "seek", "g", "a", r.Generation, map[int]int64{0: 2})

	// latest: nothing until new events.
	gseek(t, env, "seek", "g", map[string]any{"to": "latest"})
	require.Equal(t, []int64{5, 5}, committed(gdescribe(t, env, "seek", "g")))
	require.Empty(t, gpoll(t, env, "seek", "g", "a", nil).Events)
	publishTo(t, env, "seek", 2, 1, 0, 1)
	r = gpoll(t, env, "seek", "g", "a", nil)
	require.Equal(t, map[int][]int64{0: {6}, 1: {6}}, byPartition(r.Events))

	// A time: from the first event at or after it.
	var at time.Time
	for _, e := range readEvents(t, env, "seek", "?partition=0").Events {
		if e.ID == second[0].ID {
			at = e.PublishedAt
		}
	}
	require.False(t, at.IsZero())
	gseek(t, env, "seek", "g", map[string]any{"to": at.Format(time.RFC3339Nano)})
	require.Equal(t, []int64{3, 3}, committed(gdescribe(t, env, "seek", "g")))
	r = gpoll(t, env, "seek", "g", "a", nil)
	require.Equal(t, map[int][]int64{0: offsetRange(4, 6), 1: offsetRange(4, 6)}, byPartition(r.Events))

	// Explicit offsets: the named partition's next event is that offset;
	// the others keep their positions.
	gseek(t, env, "seek", "g", map[string]any{"offsets": map[string]int64{"0": 3}})
	g = gdescribe(t, env, "seek", "g")
	require.Equal(t, []int64{2, 3}, committed(g))
	r = gpoll(t, env, "seek", "g", "a", nil)
	require.Equal(t, map[int][]int64{0: offsetRange(3, 6)}, byPartition(r.Events))
	gcommitOK(t, env, "seek", "g", "a", r.Generation, map[int]int64{0: 6, 1: 6})

	// Up to the next offset (head + 1) is allowed: nothing to read.
	gseek(t, env, "seek", "g", map[string]any{"offsets": map[string]int64{"0": 7, "1": 0}})
	require.Equal(t, []int64{6, -1}, committed(gdescribe(t, env, "seek", "g")), "seek moves back")
	r = gpoll(t, env, "seek", "g", "a", nil)
	require.Equal(t, map[int][]int64{1: offsetRange(0, 6)}, byPartition(r.Events))

	// A group nobody has joined can be moved too.
	gpoll(t, env, "seek", "idle", "x", nil)
	gseek(t, env, "seek", "idle", map[string]any{"to": "earliest"})
	require.Equal(t, []int64{-1, -1}, committed(gdescribe(t, env, "seek", "idle")))
}

// TestGroupRetentionSkips: a group whose position is behind the retained
// log moves to the oldest retained event, visibly.
func TestGroupRetentionSkips(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "expire", map[string]any{"partitions": 2}, http.StatusCreated)
	publishTo(t, env, "expire", 2, 8, 0)
	publishTo(t, env, "expire", 2, 2, 1)

	// Groups at -1 on both partitions, with their fetch positions there too.
	for _, group := range []string{"g", "h"} {
		gpoll(t, env, "expire", group, "a", map[string]any{"start": "earliest", "max_events": 1})
		gseek(t, env, "expire", group, map[string]any{"to": "earliest"})
		require.Equal(t, []int64{-1, -1}, committed(gdescribe(t, env, "expire", group)))
	}

	ctx := context.Background()
	conn := dbConn(t, env.DatabaseURL)
	tag, err := conn.Exec(ctx, `DELETE FROM ferry.events
		WHERE topic_id = (SELECT id FROM ferry.topics WHERE name = $1) AND partition = 0 AND "offset" < 5`, "expire")
	require.NoError(t, err)
	require.EqualValues(t, 5, tag.RowsAffected())

	// g is moved by a describe, h by the list (which describes it).
	g := gdescribe(t, env, "expire", "g")
	a := "a"
	require.Equal(t, client.GroupPartition{Partition: 0, CommittedOffset: 4, HeadOffset: 7, Lag: 3, Owner: &a, ExpiredSkipped: 5}, g.Partitions[0])
	require.Equal(t, client.GroupPartition{Partition: 1, CommittedOffset: -1, HeadOffset: 1, Lag: 2, Owner: &a}, g.Partitions[1])
	lr := env.Do("GET", tpath("expire", "/groups"), nil)
	require.Equal(t, http.StatusOK, lr.Status, "%s", lr.Body)
	var list struct {
		Groups []client.Group `json:"groups"`
	}
	lr.JSON(t, &list)
	require.Len(t, list.Groups, 2)
	for _, x := range list.Groups {
		require.Equal(t, client.GroupPartition{Partition: 0, CommittedOffset: 4, HeadOffset: 7, Lag: 3, Owner: &a, ExpiredSkipped: 5}, x.Partitions[0], x.Name)
	}
	for _, group := range []string{"g", "h"} {
		r := gpoll(t, env, "expire", group, "a", nil)
		require.Equal(t, map[int][]int64{0: offsetRange(5, 7), 1: {0, 1}}, byPartition(r.Events), group)
		require.EqualValues(t, 5, gdescribe(t, env, "expire", group).Partitions[0].ExpiredSkipped, "counted once")
	}

	m, _ := metrics(t, env)
	for _, group := range []string{"g", "h"} {
		require.Equal(t, 5.0, m[`ferry_consumer_group_expired_skipped_total{group="`+group+`",topic="expire"}`], group)
	}
}

// TestGroupBadInput: invalid requests are clear 4xx problems that change
// nothing.
func TestGroupBadInput(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "bad", map[string]any{"partitions": 4}, http.StatusCreated)
	publishTo(t, env, "bad", 4, 2, 0, 1, 2, 3)
	a := gpoll(t, env, "bad", "g", "a", map[string]any{"start": "earliest"})
	gcommitOK(t, env, "bad", "g", "a", a.Generation, map[int]int64{0: 0})

	type state struct {
		generation int64
		members    []string
		partitions []client.GroupPartition
		groups     int
	}
	snap := func(t testing.TB, env *ferrytest.Env) state {
		t.Helper()
		g := gdescribe(t, env, "bad", "g")
		s := state{generation: g.Generation, partitions: g.Partitions}
		for _, m := range g.Members {
			s.members = append(s.members, m.Consumer)
		}
		r := env.Do("GET", tpath("bad", "/groups"), nil)
		require.Equal(t, http.StatusOK, r.Status)
		var list struct {
			Groups []client.Group `json:"groups"`
		}
		r.JSON(t, &list)
		s.groups = len(list.Groups)
		return s
	}
	poll, commit, seek, leave := gpath("bad", "g", "/poll"), gpath("bad", "g", "/commit"), gpath("bad", "g", "/seek"), gpath("bad", "g", "/leave")
	c := func(extra map[string]any) map[string]any {
		body := map[string]any{"consumer": "n", "generation": a.Generation, "offsets": map[string]any{"0": 1}}
		for k, v := range extra {
			if v == nil {
				delete(body, k)
			} else {
				body[k] = v
			}
		}
		return body
	}
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, field        string
	}{
		{"poll without consumer", "POST", poll, map[string]any{}, 400, "invalid_request", "consumer"},
		{"poll without body", "POST", poll, nil, 400, "invalid_request", ""},
		{"poll bad consumer", "POST", poll, map[string]any{"consumer": "no spaces"}, 400, "invalid_request", "consumer"},
		{"poll empty consumer", "POST", poll, map[string]any{"consumer": ""}, 400, "invalid_request", "consumer"},
		{"poll consumer not a string", "POST", poll, map[string]any{"consumer": 7}, 400, "invalid_request", ""},
		{"poll max_events 0", "POST", poll, map[string]any{"consumer": "n", "max_events": 0}, 400, "invalid_request", "max_events"},
		{"poll max_events 1001", "POST", poll, map[string]any{"consumer": "n", "max_events": 1001}, 400, "invalid_request", "max_events"},
		{"poll wait_seconds 21", "POST", poll, map[string]any{"consumer": "n", "wait_seconds": 21}, 400, "invalid_request", "wait_seconds"},
		{"poll wait_seconds -1", "POST", poll, map[string]any{"consumer": "n", "wait_seconds": -1}, 400, "invalid_request", "wait_seconds"},
		{"poll session 4", "POST", poll, map[string]any{"consumer": "n", "session_timeout_seconds": 4}, 400, "invalid_request", "session_timeout_seconds"},
		{"poll session 301", "POST", poll, map[string]any{"consumer": "n", "session_timeout_seconds": 301}, 400, "invalid_request", "session_timeout_seconds"},
		{"poll wait equal to session", "POST", poll, map[string]any{"consumer": "n", "wait_seconds": 10, "session_timeout_seconds": 10}, 400, "invalid_request", "wait_seconds"},
		{"poll wait above session", "POST", poll, map[string]any{"consumer": "n", "wait_seconds": 6, "session_timeout_seconds": 5}, 400, "invalid_request", "wait_seconds"},
		{"poll start yesterday", "POST", poll, map[string]any{"consumer": "n", "start": "yesterday"}, 400, "invalid_request", "start"},
		{"poll unknown field", "POST", poll, map[string]any{"consumer": "n", "group": "g"}, 400, "invalid_request", ""},
		{"poll fractional max_events", "POST", poll, map[string]any{"consumer": "n", "max_events": 1.5}, 400, "invalid_request", ""},

		{"commit negative offset", "POST", commit, c(map[string]any{"consumer": "a", "offsets": map[string]any{"0": -1}}), 400, "invalid_request", "offsets.0"},
		{"commit beyond head", "POST", commit, c(map[string]any{"consumer": "a", "offsets": map[string]any{"0": 2}}), 400, "invalid_request", "offsets.0"},
		{"commit far beyond head", "POST", commit, c(map[string]any{"consumer": "a", "offsets": map[string]any{"1": 1, "2": 1 << 40}}), 400, "invalid_request", "offsets.2"},
		{"commit unknown partition", "POST", commit, c(map[string]any{"consumer": "a", "offsets": map[string]any{"9": 0}}), 400, "invalid_request", "offsets.9"},
		{"commit partition 4 of 4", "POST", commit, c(map[string]any{"consumer": "a", "offsets": map[string]any{"4": 0}}), 400, "invalid_request", "offsets.4"},
		{"commit partition x", "POST", commit, c(map[string]any{"consumer": "a", "offsets": map[string]any{"x": 0}}), 400, "invalid_request", "offsets"},
		{"commit partition 01", "POST", commit, c(map[string]any{"consumer": "a", "offsets": map[string]any{"01": 0}}), 400, "invalid_request", "offsets"},
		{"commit partition -1", "POST", commit, c(map[string]any{"consumer": "a", "offsets": map[string]any{"-1": 0}}), 400, "invalid_request", "offsets"},
		{"commit fractional offset", "POST", commit, c(map[string]any{"consumer": "a", "offsets": map[string]any{"1": 0.5}}), 400, "invalid_request", ""},
		{"commit empty offsets", "POST", commit, c(map[string]any{"consumer": "a", "offsets": map[string]any{}}), 400, "invalid_request", "offsets"},
		{"commit without offsets", "POST", commit, c(map[string]any{"consumer": "a", "offsets": nil}), 400, "invalid_request", "offsets"},
		{"commit without generation", "POST", commit, c(map[string]any{"consumer": "a", "generation": nil}), 400, "invalid_request", "generation"},
		{"commit negative generation", "POST", commit, c(map[string]any{"consumer": "a", "generation": -1}), 400, "invalid_request", "generation"},
		{"commit without consumer", "POST", commit, c(map[string]any{"consumer": nil}), 400, "invalid_request", "consumer"},
		{"commit bad consumer", "POST", commit, c(map[string]any{"consumer": "a/b"}), 400, "invalid_request", "consumer"},
		{"commit unknown field", "POST", commit, c(map[string]any{"consumer": "a", "partition": 0}), 400, "invalid_request", ""},

		{"seek both", "POST", seek, map[string]any{"to": "earliest", "offsets": map[string]any{"0": 0}}, 400, "invalid_request", ""},
		{"seek neither", "POST", seek, map[string]any{}, 400, "invalid_request", ""},
		{"seek without body", "POST", seek, nil, 400, "invalid_request", ""},
		{"seek to yesterday", "POST", seek, map[string]any{"to": "yesterday"}, 400, "invalid_request", "to"},
		{"seek negative offset", "POST", seek, map[string]any{"offsets": map[string]any{"0": -1}}, 400, "invalid_request", "offsets.0"},
		{"seek beyond next offset", "POST", seek, map[string]any{"offsets": map[string]any{"0": 3}}, 400, "invalid_request", "offsets.0"},
		{"seek unknown partition", "POST", seek, map[string]any{"offsets": map[string]any{"9": 0}}, 400, "invalid_request", "offsets.9"},
		{"seek partition x", "POST", seek, map[string]any{"offsets": map[string]any{"x": 0}}, 400, "invalid_request", "offsets"},
		{"seek empty offsets", "POST", seek, map[string]any{"offsets": map[string]any{}}, 400, "invalid_request", "offsets"},

		{"leave without consumer", "POST", leave, map[string]any{}, 400, "invalid_request", "consumer"},
		{"leave without body", "POST", leave, nil, 400, "invalid_request", ""},
		{"leave bad consumer", "POST", leave, map[string]any{"consumer": "a b"}, 400, "invalid_request", "consumer"},
		{"leave empty consumer", "POST", leave, map[string]any{"consumer": ""}, 400, "invalid_request", "consumer"},
		{"leave consumer not a string", "POST", leave, map[string]any{"consumer": 1}, 400, "invalid_request", ""},
		{"leave unknown field", "POST", leave, map[string]any{"consumer": "a", "generation": 1}, 400, "invalid_request", ""},
		{"leave consumer twice", "POST", leave, `{"consumer":"a","consumer":"a"}`, 400, "invalid_request", ""},
		{"leave Consumer", "POST", leave, map[string]any{"Consumer": "a"}, 400, "invalid_request", ""},
		{"bad group name leave", "POST", tpath("bad", "/groups/g!/leave"), map[string]any{"consumer": "a"}, 400, "invalid_request", "group"},
		{"unknown topic leave", "POST", gpath("nope", "g", "/leave"), map[string]any{"consumer": "a"}, 404, "not_found", ""},
		{"unknown group leave", "POST", gpath("bad", "h", "/leave"), map[string]any{"consumer": "a"}, 404, "not_found", ""},

		{"bad group name poll", "POST", tpath("bad", "/groups/-g/poll"), map[string]any{"consumer": "n"}, 400, "invalid_request", "group"},
		{"bad group name describe", "GET", tpath("bad", "/groups/g%20h"), nil, 400, "invalid_request", "group"},
		{"bad topic name list", "GET", tpath("b@d", "/groups"), nil, 400, "invalid_request", "topic"},

		{"unknown topic poll", "POST", gpath("nope", "g", "/poll"), map[string]any{"consumer": "n"}, 404, "not_found", ""},
		{"unknown topic commit", "POST", gpath("nope", "g", "/commit"), c(map[string]any{"consumer": "a"}), 404, "not_found", ""},
		{"unknown topic seek", "POST", gpath("nope", "g", "/seek"), map[string]any{"to": "earliest"}, 404, "not_found", ""},
		{"unknown topic describe", "GET", gpath("nope", "g"), nil, 404, "not_found", ""},
		{"unknown topic delete", "DELETE", gpath("nope", "g"), nil, 404, "not_found", ""},
		{"unknown topic list", "GET", tpath("nope", "/groups"), nil, 404, "not_found", ""},
		{"unknown group commit", "POST", gpath("bad", "h", "/commit"), c(map[string]any{"consumer": "a"}), 404, "not_found", ""},
		{"unknown group seek", "POST", gpath("bad", "h", "/seek"), map[string]any{"to": "earliest"}, 404, "not_found", ""},
		{"unknown group seek offsets", "POST", gpath("bad", "h", "/seek"), map[string]any{"offsets": map[string]any{"0": 0}}, 404, "not_found", ""},
		{"unknown group describe", "GET", gpath("bad", "h"), nil, 404, "not_found", ""},
		{"unknown group delete", "DELETE", gpath("bad", "h"), nil, 404, "not_found", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := forTest(env, t)
			before := snap(t, env)
			r := env.Do(tc.method, tc.path, tc.body)
			p := requireProblem(t, r, tc.status, tc.code)
			if tc.field != "" {
				errs, ok := p["errors"].([]any)
				require.True(t, ok && len(errs) > 0, "the problem names the field: %s", r.Body)
				require.Equal(t, tc.field, errs[0].(map[string]any)["field"], "%s", r.Body)
			}
			require.Equal(t, before, snap(t, env), "a refused request changes nothing")
		})
	}
	// The member survived all that and can still commit.
	gcommitOK(t, env, "bad", "g", "a", a.Generation, map[int]int64{0: 1, 3: 1})
}

// TestGroupLongPoll: a long poll with nothing to read waits, and returns
// promptly when an event of the member's partitions is published.
func TestGroupLongPoll(t *testing.T) {
	t.Parallel()
	_, envs := pollingServers(t, "ferry-lp")
	env := envs[0]
	putTopic(t, env, "lp", map[string]any{"partitions": 2}, http.StatusCreated)
	require.Empty(t, gpoll(t, env, "lp", "g", "a", nil).Events)

	// Nothing comes: empty after the whole wait.
	_, res, err := gpollAsync(env, "lp", "g", "a", map[string]any{"wait_seconds": 1})
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.took, 900*time.Millisecond, "a long poll with nothing to read must wait")

	done := parked(t, "group poll", env, func() asyncResult {
		_, res, _ := gpollAsync(env, "lp", "g", "a", map[string]any{"wait_seconds": 5})
		return res
	})
	sent := publishTo(t, env, "lp", 2, 1, 1)
	sentAt := time.Now()
	res = <-done
	requireOK(t, res)
	r, err := decodeGroupPoll(res.body)
	require.NoError(t, err)
	require.Len(t, r.Events, 1, "the long poll returned without the event after %s", res.took)
	require.Equal(t, sent[0].ID, r.Events[0].ID)
	// Woken, not timed out (the wait is 5 s; generous for a loaded -race run).
	require.Less(t, time.Since(sentAt), 4*time.Second)
}

// TestGroupPartitionsGrow: partitions added to the topic join the group's
// assignment at the next poll and are read from their beginning.
func TestGroupPartitionsGrow(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "grow", map[string]any{"partitions": 2}, http.StatusCreated)
	a := gpoll(t, env, "grow", "g", "a", nil)
	require.Equal(t, []int{0, 1}, a.Partitions)

	putTopic(t, env, "grow", map[string]any{"partitions": 3}, http.StatusOK)
	publishTo(t, env, "grow", 3, 2, 2)
	r := gpoll(t, env, "grow", "g", "a", nil)
	require.Equal(t, []int{0, 1, 2}, r.Partitions)
	require.Greater(t, r.Generation, a.Generation, "the new partition is an assignment change")
	require.Equal(t, map[int][]int64{2: {0, 1}}, byPartition(r.Events), "a new partition is read from its beginning")
	g := gdescribe(t, env, "grow", "g")
	require.Len(t, g.Partitions, 3)
	require.Equal(t, []int64{-1, -1, -1}, committed(g))
	gcommitOK(t, env, "grow", "g", "a", r.Generation, map[int]int64{2: 1})
	require.Equal(t, []int64{-1, -1, 1}, committed(gdescribe(t, env, "grow", "g")))
}

// TestGroupDelete: a deleted group is gone; a later poll creates it anew.
func TestGroupDelete(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	a := pollFour(t, env, "del")
	gcommitOK(t, env, "del", "g", "a", a.Generation, map[int]int64{0: 0})

	r := env.Do("DELETE", gpath("del", "g"), nil)
	require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	require.Empty(t, r.Body)
	requireProblem(t, env.Do("GET", gpath("del", "g"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("DELETE", gpath("del", "g"), nil), http.StatusNotFound, "not_found")
	requireProblem(t, gcommit(t, env, "del", "g", "a", a.Generation, map[int]int64{0: 1}), http.StatusNotFound, "not_found")
	requireProblem(t, env.Do("POST", gpath("del", "g", "/seek"), map[string]any{"to": "earliest"}), http.StatusNotFound, "not_found")
	lr := env.Do("GET", tpath("del", "/groups"), nil)
	require.Equal(t, http.StatusOK, lr.Status)
	require.JSONEq(t, `{"groups": [], "next": null}`, string(lr.Body))

	// Anew, at latest: the old events are not returned.
	r2 := gpoll(t, env, "del", "g", "a", nil)
	require.Empty(t, r2.Events)
	require.EqualValues(t, 1, r2.Generation)
	g := gdescribe(t, env, "del", "g")
	require.Equal(t, []int64{1, 1}, committed(g))
	require.Equal(t, []int64{0, 0}, []int64{g.Partitions[0].ExpiredSkipped, g.Partitions[1].ExpiredSkipped})

	// Deleting the topic deletes its groups.
	require.Equal(t, http.StatusNoContent, env.Do("DELETE", tpath("del"), nil).Status)
	putTopic(t, env, "del", map[string]any{"partitions": 2}, http.StatusCreated)
	requireProblem(t, env.Do("GET", gpath("del", "g"), nil), http.StatusNotFound, "not_found")
}

// TestGroupMetrics: rebalances, fenced commits, lag and members are
// exported.
func TestGroupMetrics(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putTopic(t, env, "mt", map[string]any{"partitions": 4}, http.StatusCreated)
	a := gpoll(t, env, "mt", "g", "a", nil)
	b := gpoll(t, env, "mt", "g", "b", nil)
	publishTo(t, env, "mt", 4, 3, 0)
	publishTo(t, env, "mt", 4, 1, 1, 2, 3)
	gfenced(t, env, "mt", "g", "a", a.Generation, map[int]int64{b.Partitions[0]: 0})

	m, text := metrics(t, env)
	for _, name := range []string{"ferry_consumer_group_lag", "ferry_consumer_group_members"} {
		require.Contains(t, text, "# TYPE "+name+" gauge")
	}
	for _, name := range []string{"ferry_consumer_group_rebalances_total", "ferry_consumer_group_fenced_commits_total"} {
		require.Contains(t, text, "# TYPE "+name+" counter")
	}
	require.Equal(t, 2.0, m[`ferry_consumer_group_rebalances_total{group="g",topic="mt"}`], "a's join and b's")
	require.Equal(t, 1.0, m[`ferry_consumer_group_fenced_commits_total{group="g",topic="mt"}`])
	require.Equal(t, 3.0, m[`ferry_consumer_group_lag{group="g",partition="0",topic="mt"}`])
	require.Contains(t, m, `ferry_consumer_group_lag{group="g",partition="3",topic="mt"}`)
	require.Equal(t, 1.0, m[`ferry_consumer_group_lag{group="g",partition="3",topic="mt"}`])
	require.Equal(t, 2.0, m[`ferry_consumer_group_members{group="g",topic="mt"}`])

	// The owner of partition 0 reads and commits it: no lag.
	owner := "a"
	if slices.Contains(b.Partitions, 0) {
		owner = "b"
	}
	r := gpoll(t, env, "mt", "g", owner, nil)
	require.Equal(t, []int64{0, 1, 2}, byPartition(r.Events)[0])
	gcommitOK(t, env, "mt", "g", owner, r.Generation, lastOffsets(r.Events))
	m, _ = metrics(t, env)
	require.Equal(t, 0.0, m[`ferry_consumer_group_lag{group="g",partition="0",topic="mt"}`])
}

// gleave makes consumer leave group and requires a 204 with no body.
func gleave(t testing.TB, env *ferrytest.Env, topic, group, consumer string) {
	t.Helper()
	require.NoError(t, api(env).LeaveGroup(t.Context(), topic, group, consumer), "leave "+consumer)
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
