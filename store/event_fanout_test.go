package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Invariant 8: every published event is delivered exactly once to every
// subscription whose filter selects it, and to no other, while eight
// publishers (EventPublish and a Publisher) race with a goroutine that
// keeps creating and deleting a subscription and flipping another's
// filter (every such change makes publishes that read the subscriptions
// before it start again). Afterwards: each stable subscription holds
// exactly the events its filter selects, once, each as EventRead returns
// it; the flipping subscription got, from every publish request, the
// events one of its two filters selects (a request is in one
// transaction); the ordered subscription's groups have their oldest
// delivery as the only head; and no delivery belongs to a deleted
// subscription.
func TestSubscriptionFanoutExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "fan", 4)

	stable := []fanSub{
		{name: "all", filter: ``, match: func(fanEvent) bool { return true }},
		{name: "orders", filter: `{"types":["order.#"]}`, ordered: true,
			match: func(ev fanEvent) bool { return ev.typ == "order" || strings.HasPrefix(ev.typ, "order.") }},
		{name: "eu-created", filter: `{"types":["#.created"],"attributes":{"region":["eu"]}}`,
			match: func(ev fanEvent) bool { return strings.HasSuffix(ev.typ, ".created") && ev.region == "eu" }},
		{name: "big-vip", filter: `{"data":{"n":[3,4],"flags.vip":[true]}}`,
			match: func(ev fanEvent) bool { return ev.n != "" && numberIn(ev.n, 3, 4) && ev.vip == `true` }},
		{name: "none", filter: `{"types":["nothing.*"]}`, match: func(fanEvent) bool { return false }},
	}
	subs := map[string]store.Subscription{}
	for _, s := range stable {
		subs[s.name], _ = e.subscribe(tp, s.name, s.filter, store.SubscriptionPatch{Ordered: ptr(s.ordered)})
	}
	flip, _ := e.subscribe(tp, "flip", fanFlipA.filter, store.SubscriptionPatch{})

	publisher := store.NewPublisher(e.pool, store.PublisherConfig{})
	t.Cleanup(publisher.Close)

	const (
		publishers = 8
		batches    = 50
		churnEvery = 3 // publish requests per churn cycle
	)
	var (
		mu       sync.Mutex
		events   = map[string]fanEvent{}
		results  = map[string]store.PublishResult{}
		byBatch  [][]string
		busy     atomic.Int64
		progress = make(chan struct{}, publishers*batches)
		wg       sync.WaitGroup
	)
	for g := range publishers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 8))
			for b := range batches {
				n := 1 + rng.IntN(20)
				batch := make([]store.PublishEvent, n)
				evs := make([]fanEvent, n)
				for i := range n {
					ev := fanEvent{id: fmt.Sprintf("g%d-b%d-e%d", g, b, i), typ: fanTypes[rng.IntN(len(fanTypes))]}
					pe := store.PublishEvent{ID: ev.id, Type: ev.typ}
					if rng.IntN(4) > 0 {
						ev.key = ptr(fmt.Sprintf("k%d", rng.IntN(16)))
						pe.Key = ev.key
					}
					if rng.IntN(5) > 0 {
						ev.region = fanRegions[rng.IntN(len(fanRegions))]
						pe.Attributes = json.RawMessage(fmt.Sprintf(`{"region":%q,"g":"%d"}`, ev.region, g))
					}
					if rng.IntN(5) > 0 {
						ev.n, ev.vip = fanNs[rng.IntN(len(fanNs))], fanVips[rng.IntN(len(fanVips))]
						pe.Data = json.RawMessage(fmt.Sprintf(`{"n":%s,"flags":{"vip":%s},"items":[%d]}`, ev.n, ev.vip, i))
					}
					batch[i], evs[i] = pe, ev
				}
				var (
					res []store.PublishResult
					err error
				)
				for {
					if g%2 == 0 {
						res, _, err = store.EventPublish(e.ctx, e.pool, tp, batch)
					} else {
						res, err = publisher.Publish(e.ctx, tp, batch)
					}
					// Busy: the subscriptions changed under every attempt;
					// nothing was written, so the same ids publish afresh.
					if !errors.Is(err, store.ErrBusy) {
						break
					}
					busy.Add(1)
				}
				if !assertNoErr(t, err, "publish") {
					return
				}
				mu.Lock()
				var ids []string
				for i, ev := range evs {
					events[ev.id] = ev
					results[ev.id] = res[i]
					ids = append(ids, ev.id)
				}
				byBatch = append(byBatch, ids)
				mu.Unlock()
				progress <- struct{}{}
			}
		})
	}

	// The churner: between two of its cycles (two changes each) a few
	// publishes complete, so publishers make progress while many of them
	// read subscriptions that change before they commit.
	stop := make(chan struct{})
	churned := make(chan error, 1)
	var (
		cycles       int
		ephemeralIDs []int64
	)
	go func() {
		churned <- func() error {
			flipB := false
			exists := false
			for i := 0; ; i++ {
				for range churnEvery {
					select {
					case <-stop:
						if exists {
							return e.deleteSubscription(tp, "ephemeral", &ephemeralIDs)
						}
						return nil
					case <-progress:
					}
				}
				if exists {
					if err := e.deleteSubscription(tp, "ephemeral", &ephemeralIDs); err != nil {
						return err
					}
				} else {
					start := store.StartPosition{}
					if i%10 == 0 {
						start.Earliest = true
					}
					if _, _, _, err := store.SubscriptionUpsert(e.ctx, e.pool, tp, "ephemeral", store.SubscriptionPatch{Start: start}); err != nil {
						return fmt.Errorf("create ephemeral: %w", err)
					}
				}
				exists = !exists
				flipB = !flipB
				next := fanFlipA.filter
				if flipB {
					next = fanFlipB.filter
				}
				f, err := store.ParseFilter([]byte(next))
				if err != nil {
					return err
				}
				if _, _, _, err := store.SubscriptionUpsert(e.ctx, e.pool, tp, "flip", store.SubscriptionPatch{Filter: f}); err != nil {
					return fmt.Errorf("flip: %w", err)
				}
				cycles++
			}
		}()
	}()
	wg.Wait()
	close(stop)
	require.NoError(t, <-churned)
	if t.Failed() {
		return
	}
	t.Logf("%d events in %d requests; %d churn cycles, %d subscriptions deleted; %d publishes busy",
		len(events), len(byBatch), cycles, len(ephemeralIDs), busy.Load())
	require.Greater(t, cycles, 20, "the churner must have interleaved with the publishes")
	require.Equal(t, publishers*batches, len(byBatch))

	// The log holds every event, where its publish said.
	logged := e.allEvents(tp)
	require.Len(t, logged, len(events))
	for id, r := range results {
		require.False(t, r.Duplicate, "event %s", id)
		ev, ok := logged[id]
		require.True(t, ok, "event %s not in the log", id)
		require.Equal(t, r.Partition, ev.Partition, "event %s", id)
		require.Equal(t, r.Offset, ev.Offset, "event %s", id)
	}

	checkBodies := func(ds []delivery) {
		for _, d := range ds {
			require.Equal(t, d.EventID, d.Body.ID)
			requireBodyIsEvent(t, d.Body, logged[d.EventID])
		}
	}
	for _, s := range stable {
		sub := subs[s.name]
		want := map[string]bool{}
		for id, ev := range events {
			if s.match(ev) {
				want[id] = true
			}
		}
		ds := e.deliveries(sub.ID)
		requireSameSet(t, want, e.deliveredIDs(sub.ID), s.name)
		require.Len(t, ds, len(want), s.name)
		checkBodies(ds)
		e.requireCountersExact(sub.Queue)

		heads := map[string]int64{}
		for _, d := range ds { // by id
			ev := events[d.EventID]
			if !s.ordered || ev.key == nil {
				require.Nil(t, d.Grp, "%s: event %s", s.name, d.EventID)
				require.False(t, d.Waiting, "%s: event %s", s.name, d.EventID)
				continue
			}
			require.Equal(t, ev.key, d.Grp, "%s: event %s", s.name, d.EventID)
			if _, ok := heads[*d.Grp]; !ok {
				heads[*d.Grp] = d.ID
				require.False(t, d.Waiting, "%s: the oldest delivery of group %s must be its head", s.name, *d.Grp)
			} else {
				require.True(t, d.Waiting, "%s: group %s has a second head %d", s.name, *d.Grp, d.ID)
			}
		}
		if s.ordered {
			// Within a group (one key, so one partition), delivery ids
			// follow offsets.
			last := map[string]int64{}
			for _, d := range ds {
				if d.Grp == nil {
					continue
				}
				if prev, ok := last[*d.Grp]; ok {
					require.Greater(t, d.Body.Offset, prev, "%s: group %s out of offset order", s.name, *d.Grp)
				}
				last[*d.Grp] = d.Body.Offset
			}
			require.NotEmpty(t, heads)
		}
	}

	// The flipping subscription: each request wholly by one filter.
	got := e.deliveredIDs(flip.ID)
	checkBodies(e.deliveries(flip.ID))
	seen := 0
	for _, ids := range byBatch {
		a, b, in := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, id := range ids {
			if fanFlipA.match(events[id]) {
				a[id] = true
			}
			if fanFlipB.match(events[id]) {
				b[id] = true
			}
			if got[id] {
				in[id] = true
				seen++
			}
		}
		byA := len(setDiff(a, in)) == 0 && len(setDiff(in, a)) == 0
		byB := len(setDiff(b, in)) == 0 && len(setDiff(in, b)) == 0
		require.True(t, byA || byB, "request %v: delivered %v, filter A selects %v, filter B %v", ids, in, a, b)
	}
	require.Equal(t, len(got), seen, "deliveries of events nobody published")

	// No delivery of a deleted subscription: each delete removed the
	// subscription's deliveries in its own transaction, so any left was
	// written after the delete committed.
	require.NotEmpty(t, ephemeralIDs)
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = ANY($1)`, ephemeralIDs),
		"deliveries written to deleted subscriptions")
	require.Zero(t, e.count(`
		SELECT count(*) FROM ferry.messages m WHERE NOT EXISTS (SELECT 1 FROM ferry.queues q WHERE q.id = m.queue_id)`),
		"orphan deliveries")
}

// A filter change and publishes are ordered: an event published before
// the change returns is matched by the old filter, after it by the new;
// and a publish that read the subscriptions before a change but commits
// after it is matched by the new filter.
func TestSubscriptionFilterChangeOrdering(t *testing.T) {
	t.Parallel()

	t.Run("sequential", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "seq", 2)
		s, _ := e.subscribe(tp, "s", `{"types":["a.*"]}`, store.SubscriptionPatch{})
		pub := func(id, typ string) { e.publish(tp, store.PublishEvent{ID: id, Type: typ}) }

		pub("1a", "a.x")
		pub("1b", "b.x")
		e.setFilter(tp, "s", `{"types":["b.*"]}`)
		pub("2a", "a.x")
		pub("2b", "b.x")
		e.setFilter(tp, "s", `{"types":["b.*"],"attributes":{"r":["eu"]}}`)
		pub("3b", "b.x")
		e.publish(tp, store.PublishEvent{ID: "3b-eu", Type: "b.x", Attributes: json.RawMessage(`{"r":"eu"}`)})
		e.setFilter(tp, "s", ``) // every event
		pub("4a", "a.x")
		pub("4c", "c")
		e.setFilter(tp, "s", `{"types":["nothing"]}`)
		pub("5a", "a.x")

		requireSameSet(t, setOf("1a", "2b", "3b-eu", "4a", "4c"), e.deliveredIDs(s.ID), "deliveries")
	})

	t.Run("publish read the old filter", func(t *testing.T) {
		t.Parallel()
		e, tp := newTopicEnv(t, "race", 1)
		s, _ := e.subscribe(tp, "s", `{"types":["old"]}`, store.SubscriptionPatch{})

		// Hold the topic's only partition, so that the filter change waits
		// for it first and the publish queues behind the change.
		holder, err := e.pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = holder.Rollback(e.ctx) }()
		_, err = holder.Exec(e.ctx, `SELECT 1 FROM ferry.topic_partitions WHERE topic_id = $1 FOR UPDATE`, tp.ID)
		require.NoError(t, err)

		changePool := e.newNamedPool(2, "change")
		newFilter, err := store.ParseFilter([]byte(`{"types":["new"]}`))
		require.NoError(t, err)
		changed := make(chan error, 1)
		go func() {
			_, _, _, err := store.SubscriptionUpsert(e.ctx, changePool, tp, "s", store.SubscriptionPatch{Filter: newFilter})
			changed <- err
		}()
		e.activityWaitingEventually("change")

		// The publish reads the subscriptions (the old filter) in its first
		// round trip, then waits for the partition, behind the change.
		pubPool := e.newNamedPool(2, "pub")
		published := make(chan error, 1)
		go func() {
			_, _, err := store.EventPublish(e.ctx, pubPool, tp, []store.PublishEvent{
				{ID: "o", Type: "old"}, {ID: "n", Type: "new"},
			})
			published <- err
		}()
		e.activityWaitingEventually("pub")
		require.NoError(t, holder.Rollback(e.ctx))
		require.NoError(t, <-changed)
		require.NoError(t, <-published)

		requireSameSet(t, setOf("n"), e.deliveredIDs(s.ID), "deliveries of a publish committed after the change")
	})
}
