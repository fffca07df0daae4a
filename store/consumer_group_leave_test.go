package store_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// gleave makes consumer c leave group g.
func (e *env) gleave(tp store.Topic, g, c string) store.ConsumerGroupLeaveResult {
	e.t.Helper()
	res, err := store.ConsumerGroupLeave(e.ctx, e.pool, nil, store.ConsumerGroupLeaveParams{Topic: tp, Group: g, Consumer: c})
	require.NoError(e.t, err)
	return res
}

// TestGroupLeave: a leave gives the leaver's partitions to the remaining
// member in the same transaction (a new generation), from committed + 1;
// the leaver's commits are fenced; leaving again, or as a stranger,
// changes nothing; a poll of the leaver rejoins it as a new member.
func TestGroupLeave(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp := e.filledTopic("log", 4, 3)
	a := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, []int{0, 1, 2, 3}, a.Partitions)
	b := e.gpoll(tp, "g", "b", 100) // the rebalance gives b two of a's
	require.Len(t, b.Partitions, 2)
	a = e.gpoll(tp, "g", "a", 100)
	require.Equal(t, b.Generation, a.Generation)
	require.Len(t, a.Partitions, 2)
	// a read its partitions (its first poll) and commits offset 0 of one.
	require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{a.Partitions[0]: 0}))

	res := e.gleave(tp, "g", "a")
	require.True(t, res.Left)
	require.True(t, res.Rebalanced)
	g := e.gdescribe(tp, "g")
	require.Len(t, g.Members, 1)
	require.Equal(t, "b", g.Members[0].Consumer)
	require.Equal(t, []int{0, 1, 2, 3}, g.Members[0].Partitions, "assigned by the leave itself, before b polls")
	require.Equal(t, a.Generation+1, g.Generation)

	// b's next poll: the leaver's partitions, from committed + 1.
	b2 := e.gpoll(tp, "g", "b", 100)
	require.Equal(t, g.Generation, b2.Generation)
	require.Equal(t, []int{0, 1, 2, 3}, b2.Partitions)
	got := byPartition(b2.Events)
	require.Equal(t, []int64{1, 2}, got[a.Partitions[0]], "committed 0: redelivered from 1")
	require.Equal(t, []int64{0, 1, 2}, got[a.Partitions[1]], "nothing committed: redelivered from 0")
	for _, p := range b.Partitions {
		require.Empty(t, got[p], "b's own partitions continue where b was")
	}

	// The leaver is fenced, with the generation it had.
	require.ErrorIs(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{a.Partitions[0]: 1}), store.ErrFenced)
	require.ErrorIs(t, e.gcommit(tp, "g", "a", g.Generation, map[int]int64{a.Partitions[0]: 1}), store.ErrFenced)

	// Idempotent: again, and a stranger; nothing changes.
	for _, c := range []string{"a", "nobody"} {
		res := e.gleave(tp, "g", c)
		require.False(t, res.Left, c)
		require.False(t, res.Rebalanced, c)
		require.Equal(t, g.Generation, e.gdescribe(tp, "g").Generation, c)
	}
	require.Equal(t, int64(0), e.committedOffsets(tp, "g")[a.Partitions[0]], "the fenced commit kept nothing")

	// A poll of the leaver rejoins it as a new member, in a new generation;
	// its old generation stays fenced.
	a2 := e.gpoll(tp, "g", "a", 100)
	require.Greater(t, a2.Generation, g.Generation)
	require.Len(t, a2.Partitions, 2)
	require.ErrorIs(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{a2.Partitions[0]: 0}), store.ErrFenced)
	require.NoError(t, e.gcommit(tp, "g", "a", a2.Generation, map[int]int64{a2.Partitions[0]: 0}))

	// The last member leaves: nobody owns anything; a newcomer gets all.
	e.gleave(tp, "g", "a")
	e.gleave(tp, "g", "b")
	g = e.gdescribe(tp, "g")
	require.Empty(t, g.Members)
	for _, p := range g.Partitions {
		require.Nil(t, p.Owner, "partition %d", p.Partition)
	}
	c := e.gpoll(tp, "g", "c", 100)
	require.Equal(t, []int{0, 1, 2, 3}, c.Partitions)
	require.Greater(t, c.Generation, g.Generation)

	// A group or topic that does not exist is not found.
	_, err := store.ConsumerGroupLeave(e.ctx, e.pool, nil, store.ConsumerGroupLeaveParams{Topic: tp, Group: "nope", Consumer: "a"})
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestGroupLeaveEndsLongPolls: a member waiting in a long poll (nothing to
// read) returns soon after another member leaves, woken through another
// instance's Notifier (NOTIFY), so its next poll takes over at once; a
// member with no partition waiting does too.
func TestGroupLeaveEndsLongPolls(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	leaver, waiter := e.runNotifier(e.pool), e.runNotifier(e.newPool(4))
	e.gpoll(tp, "g", "a", 10)
	e.gpoll(tp, "g", "b", 10)
	e.gpoll(tp, "g", "c", 10) // three members, two partitions: one idle
	owned := map[string]int{}
	for _, m := range e.gdescribe(tp, "g").Members {
		owned[m.Consumer] = len(m.Partitions)
	}
	// The leaver owns a partition; of the two that wait, one owns the
	// other and one owns none.
	var leaving string
	for _, m := range []string{"a", "b", "c"} {
		if owned[m] == 1 {
			leaving = m
			break
		}
	}
	require.NotEmpty(t, leaving, "%v", owned)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		back = map[string]time.Time{}
	)
	for _, m := range []string{"a", "b", "c"} {
		if m == leaving {
			continue
		}
		pool := e.newNamedPool(1, "leave-waiter-"+m)
		wg.Go(func() {
			_, err := store.ConsumerGroupPoll(e.ctx, pool, waiter, store.ConsumerGroupPollParams{
				Topic: tp, Group: "g", Consumer: m, SessionTimeout: groupSession, Max: 10,
				Wait: 20 * time.Second, FallbackPoll: time.Minute,
			})
			assertNoErr(t, err, "poll "+m)
			mu.Lock()
			back[m] = time.Now()
			mu.Unlock()
		})
		// Waiting: past its refresh, its first fetch (or generation
		// check) found nothing.
		e.fetchedEventually("leave-waiter-" + m)
	}
	left := time.Now()
	_, err := store.ConsumerGroupLeave(e.ctx, e.pool, leaver, store.ConsumerGroupLeaveParams{Topic: tp, Group: "g", Consumer: leaving})
	require.NoError(t, err)
	wg.Wait()
	require.Len(t, back, 2)
	for m, at := range back {
		t.Logf("%s (owned %d) returned %v after the leave", m, owned[m], at.Sub(left))
		require.Less(t, at.Sub(left), 5*time.Second, "%s woken by the leave, not by its 20 s wait", m)
	}
	// Their next polls own a partition each.
	for m := range back {
		require.Len(t, e.gpoll(tp, "g", m, 10).Partitions, 1, m)
	}
}

// TestGroupLeaveRace: a leave concurrent with the leaver's own poll and
// another member's poll, while events are published, many times over:
// in any generation no partition is answered to two members, every event
// a poll returns is of its partitions, and the leaver's commit naming the
// generation it had before the leave is fenced.
func TestGroupLeaveRace(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 4)
	type answer struct {
		consumer string
		store.ConsumerGroupPollResult
	}
	var (
		mu      sync.Mutex
		answers []answer
	)
	poll := func(c string) {
		res, err := store.ConsumerGroupPoll(e.ctx, e.pool, nil, store.ConsumerGroupPollParams{
			Topic: tp, Group: "g", Consumer: c, SessionTimeout: groupSession, Start: store.StartPosition{Earliest: true}, Max: 100,
		})
		if assertNoErr(t, err, "poll "+c) {
			mu.Lock()
			answers = append(answers, answer{c, res})
			mu.Unlock()
		}
	}
	for p := range 4 {
		e.publishTo(tp, p, 1) // every partition has an offset 0 to commit
	}
	for i := range 30 {
		e.publishTo(tp, i%4, 2)
		a := e.gpoll(tp, "g", "a", 100)
		e.gpoll(tp, "g", "b", 100)
		a = e.gpoll(tp, "g", "a", 100)
		require.NotEmpty(t, a.Partitions)
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); poll("a") }()
		go func() { defer wg.Done(); poll("b") }()
		go func() {
			defer wg.Done()
			_, err := store.ConsumerGroupLeave(e.ctx, e.pool, nil, store.ConsumerGroupLeaveParams{Topic: tp, Group: "g", Consumer: "a"})
			assertNoErr(t, err, "leave")
		}()
		wg.Wait()
		err := e.gcommit(tp, "g", "a", a.Generation, map[int]int64{a.Partitions[0]: 0})
		require.ErrorIs(t, err, store.ErrFenced, "round %d: the leaver's commit of its old generation", i)
		g := e.gdescribe(tp, "g")
		for _, p := range g.Partitions {
			require.NotNil(t, p.Owner, "round %d: partition %d has no owner though b is a member", i, p.Partition)
			require.True(t, slices.ContainsFunc(g.Members, func(m store.ConsumerGroupMember) bool { return m.Consumer == *p.Owner }),
				"round %d: partition %d owned by %s, not a member", i, p.Partition, *p.Owner)
		}
	}
	byGen := map[int64]map[int]string{}
	for _, a := range answers {
		owned := byGen[a.Generation]
		if owned == nil {
			owned = map[int]string{}
			byGen[a.Generation] = owned
		}
		for _, p := range a.Partitions {
			if o, ok := owned[p]; ok && o != a.consumer {
				require.Failf(t, "two owners", "generation %d: partition %d answered to %s and %s", a.Generation, p, o, a.consumer)
			}
			owned[p] = a.consumer
		}
		for _, ev := range a.Events {
			require.Contains(t, a.Partitions, ev.Partition, "%s got an event of partition %d, not its own %v", a.consumer, ev.Partition, a.Partitions)
		}
	}
	require.Len(t, answers, 60, fmt.Sprint("every poll answered"))
}
