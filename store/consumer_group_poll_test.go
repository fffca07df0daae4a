package store_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// A fetch in flight when its member loses partitions is fenced: the poll
// read the events (of the generation it joined in), a rebalance or a seek
// commits, then the poll advances its positions — only of the partitions
// it still owns in its generation, and it returns only their events. The
// new owner's (or the seek's) position is not moved by the zombie.
func TestGroupFetchFenced(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*env, store.Topic, <-chan store.ConsumerGroupPollResult, func()) {
		e, tp := newTopicEnv(t, "log", 2)
		e.publishTo(tp, 0, 3)
		e.publishTo(tp, 1, 3)
		pool, h, release := e.heldPool("ferry:consumer_group_fetch_advance")
		out := make(chan store.ConsumerGroupPollResult, 1)
		go func() {
			res, err := store.ConsumerGroupPoll(e.ctx, pool, nil, store.ConsumerGroupPollParams{
				Topic: tp, Group: "g", Consumer: "a", SessionTimeout: groupSession, Start: store.StartPosition{Earliest: true}, Max: 100,
			})
			assertNoErr(t, err, "a's poll")
			out <- res
		}()
		select {
		case <-h.arrived: // a joined, owns both partitions, read 0..2 of each
		case res := <-out:
			t.Fatalf("a's poll ended before advancing: %+v", res)
		}
		return e, tp, out, release
	}

	t.Run("Rebalance", func(t *testing.T) {
		t.Parallel()
		e, tp, out, release := setup(t)
		b := e.gpoll(tp, "g", "b", 1)
		require.Len(t, b.Partitions, 1)
		moved := b.Partitions[0]
		kept := 1 - moved
		require.Equal(t, []int64{0}, eventOffsets(b.Events))
		release()
		a := <-out
		require.Less(t, a.Generation, b.Generation)
		require.Equal(t, []int{0, 1}, a.Partitions, "owned when it polled")
		require.Equal(t, map[int][]int64{kept: span(0, 2)}, byPartition(a.Events), "the moved partition's events are dropped")
		// b goes on where it stopped; a's next poll has only its partition.
		require.Equal(t, map[int][]int64{moved: span(1, 2)}, byPartition(e.gpoll(tp, "g", "b", 100).Events))
		a2 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, b.Generation, a2.Generation)
		require.Equal(t, []int{kept}, a2.Partitions)
		require.Empty(t, a2.Events, "the kept partition's position was advanced")
	})

	t.Run("Seek", func(t *testing.T) {
		t.Parallel()
		e, tp, out, release := setup(t)
		require.NoError(t, store.ConsumerGroupSeek(e.ctx, e.pool, store.ConsumerGroupSeekParams{Topic: tp, Group: "g", Offsets: map[int]int64{1: 1}}))
		release()
		a := <-out
		require.Equal(t, map[int][]int64{0: span(0, 2)}, byPartition(a.Events), "partition 1's events are dropped")
		a2 := e.gpoll(tp, "g", "a", 100)
		require.Equal(t, a.Generation+1, a2.Generation)
		require.Equal(t, map[int][]int64{1: span(1, 2)}, byPartition(a2.Events), "from the seek's position")
	})
}

// A member that took a partition over reads it from the committed offset
// + 1: what the previous owner read but did not commit is read again,
// what it committed is not.
func TestGroupResumeAfterRebalance(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 1)
	res := e.publishTo(tp, 0, 10)

	a := e.gpoll(tp, "g", "a", 100)
	require.Equal(t, span(0, 9), eventOffsets(a.Events))
	require.NoError(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 5}))
	e.expireMember(tp, "g", "a")

	b := e.gpoll(tp, "g", "b", 100)
	require.Equal(t, 1, b.Evicted)
	require.True(t, b.Rebalanced)
	require.Greater(t, b.Generation, a.Generation)
	require.Equal(t, []int{0}, b.Partitions)
	require.Equal(t, span(6, 9), eventOffsets(b.Events))
	require.Equal(t, publishedIDs(res[6:]), eventIDs(b.Events))

	// The evicted member is a zombie now.
	require.ErrorIs(t, e.gcommit(tp, "g", "a", a.Generation, map[int]int64{0: 9}), store.ErrFenced)
	g := e.gdescribe(tp, "g")
	require.Len(t, g.Members, 1)
	require.Equal(t, "b", g.Members[0].Consumer)
	require.Equal(t, []int{0}, g.Members[0].Partitions)
	require.Equal(t, int64(5), g.Partitions[0].CommittedOffset)
}

// A poll returns at most Max events, shared among the member's partitions
// so that none with events starves (Max is at least their number here),
// each partition's in offset order from its position; the next poll goes
// on from where each partition stopped.
func TestGroupPollMax(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 4)
	for p, n := range []int{5, 1, 0, 9} {
		if n > 0 {
			e.publishTo(tp, p, n)
		}
	}
	a := e.gpoll(tp, "g", "a", 4)
	require.Len(t, a.Events, 4)
	got := byPartition(a.Events)
	require.Len(t, got, 3, "every partition with events gets some: %v", got)
	for p, offs := range got {
		require.Equal(t, span(0, int64(len(offs)-1)), offs, "partition %d", p)
	}
	rest := byPartition(e.gpoll(tp, "g", "a", 100).Events)
	for p, n := range []int{5, 1, 0, 9} {
		if n > 0 {
			require.Equal(t, span(0, int64(n-1)), append(got[p], rest[p]...), "partition %d over both polls", p)
		}
	}
	require.Empty(t, e.gpoll(tp, "g", "a", 100).Events)
	require.Equal(t, []int64{-1, -1, -1, -1}, e.committedOffsets(tp, "g"), "reading commits nothing")
}

// A group is created where its first poll's start says: before the
// oldest retained event, after the newest, or before the first event
// published at or after a time; later polls' starts change nothing.
func TestGroupStartPositions(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "log", 2)
	for range 3 { // three batches, each a publish to 0 then one to 1
		e.publishTo(tp, 0, 2)
		e.publishTo(tp, 1, 1)
	}
	// Partition 0: offsets 0..5, partition 1: 0..2.
	_, err := e.pool.Exec(e.ctx, `DELETE FROM ferry.events WHERE topic_id = $1 AND partition = 0 AND "offset" < 1`, tp.ID)
	require.NoError(t, err)
	evs, _ := e.read(store.ReadParams{Topic: tp, Partition: 0})
	require.Equal(t, span(1, 5), eventOffsets(evs))
	at := evs[1].PublishedAt // offset 2: the second batch's first publish

	e.gpoll(tp, "earliest", "a", 0)
	require.Equal(t, []int64{0, -1}, e.committedOffsets(tp, "earliest"))
	e.gpollStart(tp, "latest", "a", store.StartPosition{}, 0)
	require.Equal(t, []int64{5, 2}, e.committedOffsets(tp, "latest"))
	e.gpollStart(tp, "time", "a", store.StartPosition{Time: &at}, 0)
	require.Equal(t, []int64{1, 0}, e.committedOffsets(tp, "time"))
	later := at.Add(time.Hour)
	e.gpollStart(tp, "future", "a", store.StartPosition{Time: &later}, 0)
	require.Equal(t, []int64{5, 2}, e.committedOffsets(tp, "future"))

	// An existing group keeps its position whatever a poll's start.
	res := e.gpollStart(tp, "latest", "b", store.StartPosition{Earliest: true}, 100)
	require.Empty(t, res.Events)
	require.Equal(t, []int64{5, 2}, e.committedOffsets(tp, "latest"))
	require.Zero(t, e.gdescribe(tp, "earliest").Partitions[0].ExpiredSkipped)
}

// A long poll of a member whose partitions have nothing new waits: until
// its wait ends, or — well before, with no fallback poll within it — as
// soon as a publish to the topic is announced.
func TestGroupPollLongPoll(t *testing.T) {
	t.Parallel()
	type outcome struct {
		res     store.ConsumerGroupPollResult
		err     error
		elapsed time.Duration
	}
	setup := func(t *testing.T, wait, fallback time.Duration) (*env, store.Topic, *store.Notifier, store.ConsumerGroupPollResult, <-chan outcome) {
		e, tp := newTopicEnv(t, "log", 2)
		n := e.runNotifier(e.pool)
		pollPool := e.newNamedPool(1, "grouppoll")
		first := e.gpoll(tp, "g", "a", 10) // joins: a owns both partitions
		require.Equal(t, []int{0, 1}, first.Partitions)
		out := inBackground(func(start time.Time) outcome {
			res, err := store.ConsumerGroupPoll(e.ctx, pollPool, n, store.ConsumerGroupPollParams{
				Topic: tp, Group: "g", Consumer: "a", SessionTimeout: groupSession, Max: 10,
				Wait: wait, FallbackPoll: fallback,
			})
			return outcome{res, err, time.Since(start)}
		})
		return e, tp, n, first, out
	}

	t.Run("EmptyAfterWait", func(t *testing.T) {
		t.Parallel()
		_, _, _, first, out := setup(t, 300*time.Millisecond, 50*time.Millisecond)
		r := <-out
		require.NoError(t, r.err)
		require.Empty(t, r.res.Events)
		require.Equal(t, first.Generation, r.res.Generation)
		require.GreaterOrEqual(t, r.elapsed, 300*time.Millisecond, "a poll that finds nothing waits its whole wait")
	})

	t.Run("WokenByPublish", func(t *testing.T) {
		t.Parallel()
		e, tp, n, first, out := setup(t, 5*time.Second, 10*time.Second)
		// Its first fetch found nothing: it waits.
		e.fetchedEventually("grouppoll")
		res := e.publishTo(tp, 1, 1)
		sentAt := time.Now()
		n.Published([]int64{store.TopicWakeKey(tp.ID)})
		r := <-out
		require.NoError(t, r.err)
		require.Less(t, time.Since(sentAt), 2500*time.Millisecond, "woken by the publish, not by the end of the wait")
		require.Equal(t, first.Generation, r.res.Generation)
		require.Equal(t, []string{res[0].ID}, eventIDs(r.res.Events), "the poll returned after %v", r.elapsed)
	})
}

// Exclusive ownership under concurrency: six members poll in loops while
// two publishers publish; some join late, one leaves for good, one keeps
// timing out and coming back (each time, while evicted, its commit of what
// it read is refused). Each member commits what it received. Then:
//   - no (generation, partition) is in two members' poll results, and
//     every event a poll returns is of one of its partitions, the event
//     published at that offset;
//   - within a member's consecutive polls of one generation, offsets per
//     partition go up one by one (no repeats, no gaps);
//   - once the publishers are done, the members commit everything, and
//     every partition's offsets 0..head were received (at least once).
func TestGroupExclusiveOwnershipUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const (
		partitions = 8
		members    = 6
		publishers = 2
		maxEvents  = 1000
		// maxTime only bounds a run that cannot finish: the publishers
		// stop once enough is published and the bouncing member came back
		// three times (the assertions below), which took 4 s on a quiet
		// machine and longer on a loaded one.
		maxTime = time.Minute
	)
	tp := e.topic("log", store.TopicPatch{Partitions: ptr(partitions)})
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	type pollRecord struct {
		session int // the member's how-many-th membership
		gen     int64
		parts   []int
		events  []store.Event
	}
	type stats struct{ commits, fenced, expiries int }
	var (
		records    [members][]pollRecord // each member's polls, in order
		memberStat [members]stats
		pubMu      sync.Mutex
		published  = map[[2]int64]string{} // (partition, offset) → event id
		total      atomic.Int64
		bounces    atomic.Int64 // of m4
		lateOnce   sync.Once
		late       = make(chan struct{}) // late members join once some is published
		pubDone    = make(chan struct{})
		drained    = make(chan struct{})
		pubWG      sync.WaitGroup
		memberWG   sync.WaitGroup
		deadline   = time.Now().Add(maxTime)
	)
	closeLate := func() { lateOnce.Do(func() { close(late) }) }

	for w := range publishers {
		pubWG.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			// Until enough is published and the bouncing member came back
			// a few times (or time is up).
			for (total.Load() < maxEvents || bounces.Load() < 3) && time.Now().Before(deadline) {
				evs := make([]store.PublishEvent, 1+rng.IntN(10))
				for i := range evs {
					evs[i] = store.PublishEvent{Type: "t"}
					if rng.IntN(3) > 0 {
						evs[i].Key = ptr(fmt.Sprintf("k%d", rng.IntN(30)))
					}
				}
				res, _, err := store.EventPublish(e.ctx, e.pool, tp, evs)
				if !assertNoErr(t, err, "publish") {
					return
				}
				pubMu.Lock()
				for _, r := range res {
					published[[2]int64{int64(r.Partition), r.Offset}] = r.ID
				}
				pubMu.Unlock()
				if total.Add(int64(len(evs))) >= maxEvents/4 {
					closeLate()
				}
			}
		})
	}

	// evict makes member name time out and has it evicted (by a describe,
	// unless another member's poll did it first).
	evict := func(name string) error {
		if err := expireMember(e.ctx, e, tp, "g", name); err != nil {
			return err
		}
		g, err := store.ConsumerGroupDescribe(e.ctx, e.pool, tp, "g")
		if err != nil {
			return err
		}
		for _, m := range g.Members {
			if m.Consumer == name {
				return fmt.Errorf("%s not evicted", name)
			}
		}
		return nil
	}

	for i := range members {
		memberWG.Go(func() {
			name := fmt.Sprintf("m%d", i)
			rng := rand.New(rand.NewPCG(seed, uint64(100+i)))
			if i >= 4 { // late joiners
				select {
				case <-late:
				case <-drained:
					return
				}
			}
			session := 0
			pos := map[int]int64{} // per owned partition, the last offset received
			for seq := 1; ; seq++ {
				select {
				case <-drained:
					return
				default:
				}
				res, err := store.ConsumerGroupPoll(e.ctx, e.pool, nil, store.ConsumerGroupPollParams{
					Topic: tp, Group: "g", Consumer: name, SessionTimeout: groupSession,
					Start: store.StartPosition{Earliest: true}, Max: 1 + rng.IntN(12),
				})
				if !assertNoErr(t, err, name+" poll") {
					return
				}
				records[i] = append(records[i], pollRecord{session, res.Generation, res.Partitions, res.Events})
				for _, ev := range res.Events {
					pos[ev.Partition] = ev.Offset
				}
				for p := range pos {
					if !slices.Contains(res.Partitions, p) {
						delete(pos, p)
					}
				}
				if len(pos) > 0 {
					err := store.ConsumerGroupCommit(e.ctx, e.pool, store.ConsumerGroupCommitParams{
						Topic: tp, Group: "g", Consumer: name, Generation: res.Generation, Offsets: maps.Clone(pos),
					})
					memberStat[i].commits++
					if errors.Is(err, store.ErrFenced) {
						memberStat[i].fenced++ // rebalanced meanwhile: the next poll tells
					} else if !assertNoErr(t, err, name+" commit") {
						return
					}
				}
				chaos := !isDone(pubDone)
				leave := i == 3 && seq == 10            // times out for good
				bounce := i == 4 && chaos && seq%5 == 0 // times out, comes back
				if leave || bounce {
					if !assertNoErr(t, evict(name), "evict "+name) {
						return
					}
					memberStat[i].expiries++
					if len(pos) > 0 {
						err := store.ConsumerGroupCommit(e.ctx, e.pool, store.ConsumerGroupCommitParams{
							Topic: tp, Group: "g", Consumer: name, Generation: res.Generation, Offsets: maps.Clone(pos),
						})
						if !errors.Is(err, store.ErrFenced) {
							t.Errorf("%s evicted, committing %v in generation %d: got %v, want fenced", name, pos, res.Generation, err)
						}
					}
					if leave {
						return
					}
					bounces.Add(1)
					session++
					pos = map[int]int64{}
				}
				pause(time.Duration(rng.IntN(2)) * time.Millisecond)
			}
		})
	}

	pubWG.Wait()
	closeLate()
	close(pubDone)
	heads := e.offsets(tp)
	// The members drain the topic: every partition committed up to its head.
	gid := e.groupID(tp, "g")
	drainDeadline := time.Now().Add(15 * time.Second)
	for {
		behind := e.count(`
			SELECT count(*) FROM ferry.group_partitions gp
			JOIN ferry.topic_partitions tp ON tp.topic_id = $2 AND tp.partition = gp.partition
			WHERE gp.group_id = $1 AND `+store.GroupCommittedSQL("gp")+` < `+store.PartitionNextSQL("tp")+` - 1`, gid, tp.ID)
		if behind == 0 || time.Now().After(drainDeadline) || t.Failed() {
			if behind > 0 {
				t.Errorf("%d partitions not drained: %+v", behind, e.gdescribe(tp, "g"))
			}
			break
		}
		pause(10 * time.Millisecond)
	}
	close(drained)
	memberWG.Wait()
	if t.Failed() {
		return
	}

	// Every published event is in the log where its answer said.
	var sum int64
	for _, h := range heads {
		sum += h.HeadOffset + 1
	}
	require.Equal(t, int64(len(published)), sum)
	require.GreaterOrEqual(t, sum, int64(maxEvents/4))

	owners := map[[2]int64]string{} // (generation, partition) → member
	received := map[[2]int64]int{}  // (partition, offset) → times
	polls, gens := 0, map[int64]bool{}
	for i, recs := range records {
		name := fmt.Sprintf("m%d", i)
		var (
			session = -1
			gen     int64
			last    map[int]int64
		)
		for k, r := range recs {
			polls++
			gens[r.gen] = true
			for _, p := range r.parts {
				key := [2]int64{r.gen, int64(p)}
				if o, ok := owners[key]; ok && o != name {
					t.Fatalf("generation %d: partition %d in the polls of %s and %s", r.gen, p, o, name)
				}
				owners[key] = name
			}
			if r.session != session || r.gen != gen {
				session, gen, last = r.session, r.gen, map[int]int64{}
			}
			for _, ev := range r.events {
				require.Contains(t, r.parts, ev.Partition, "%s poll %d: an event of a partition it does not own", name, k)
				require.Equal(t, published[[2]int64{int64(ev.Partition), ev.Offset}], ev.ID,
					"%s poll %d: partition %d offset %d", name, k, ev.Partition, ev.Offset)
				if prev, ok := last[ev.Partition]; ok {
					require.Equal(t, prev+1, ev.Offset, "%s poll %d, generation %d, partition %d: after %d", name, k, r.gen, ev.Partition, prev)
				}
				last[ev.Partition] = ev.Offset
				received[[2]int64{int64(ev.Partition), ev.Offset}]++
			}
		}
	}
	again := 0
	for _, h := range heads {
		for o := int64(0); o <= h.HeadOffset; o++ {
			n := received[[2]int64{int64(h.Partition), o}]
			require.NotZero(t, n, "partition %d offset %d (head %d) never received", h.Partition, o, h.HeadOffset)
			again += n - 1
		}
	}
	g := e.gdescribe(tp, "g")
	for _, p := range g.Partitions {
		require.Equal(t, p.HeadOffset, p.CommittedOffset, "partition %d", p.Partition)
	}
	require.Equal(t, 1, memberStat[3].expiries)
	require.GreaterOrEqual(t, memberStat[4].expiries, 3)
	t.Logf("%d events, %d polls in %d generations (last %d), %d received again; members: %+v",
		sum, polls, len(gens), g.Generation, again, memberStat)
}
