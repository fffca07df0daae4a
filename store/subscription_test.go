package store_test

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// subscribe creates a subscription of tp with the given filter (JSON; ""
// for none) and requires that it was created.
func (e *env) subscribe(tp store.Topic, name, filter string, p store.SubscriptionPatch) (store.Subscription, int64) {
	e.t.Helper()
	f, err := store.ParseFilter([]byte(filter))
	require.NoError(e.t, err)
	p.Filter = f
	s, created, backfilled, err := store.SubscriptionUpsert(e.ctx, e.db, tp, name, p)
	require.NoError(e.t, err)
	require.True(e.t, created, "subscription %s already existed", name)
	return s, backfilled
}

// setFilter changes a subscription's filter.
func (e *env) setFilter(tp store.Topic, name, filter string) store.Subscription {
	e.t.Helper()
	f, err := store.ParseFilter([]byte(filter))
	require.NoError(e.t, err)
	s, created, _, err := store.SubscriptionUpsert(e.ctx, e.db, tp, name, store.SubscriptionPatch{Filter: f})
	require.NoError(e.t, err)
	require.False(e.t, created)
	return s
}

// delivery is a row of ferry.messages of a subscription.
type delivery struct {
	ID      int64
	EventID string
	Grp     *string
	Waiting bool
	Body    deliveredEvent
}

// deliveredEvent is a delivery's body: the event, as ferry.event_json
// renders it.
type deliveredEvent struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Key         *string         `json:"key"`
	Data        json.RawMessage `json:"data"`
	Attributes  json.RawMessage `json:"attributes"`
	Partition   int             `json:"partition"`
	Offset      int64           `json:"offset"`
	PublishedAt string          `json:"published_at"`
}

// deliveries returns the subscription's live deliveries, by id.
func (e *env) deliveries(queueID int64) []delivery {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, `
		SELECT id, event_id, grp, waiting, body::text FROM ferry.messages WHERE queue_id = $1 ORDER BY id`, queueID)
	require.NoError(e.t, err)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (delivery, error) {
		var (
			d    delivery
			body string
		)
		if err := row.Scan(&d.ID, &d.EventID, &d.Grp, &d.Waiting, &body); err != nil {
			return d, err
		}
		return d, json.Unmarshal([]byte(body), &d.Body)
	})
	require.NoError(e.t, err)
	return out
}

// deliveredIDs returns the event ids of the subscription's live
// deliveries, requiring that no event is delivered twice.
func (e *env) deliveredIDs(queueID int64) map[string]bool {
	e.t.Helper()
	set := map[string]bool{}
	for _, d := range e.deliveries(queueID) {
		require.False(e.t, set[d.EventID], "event %s delivered twice to queue %d", d.EventID, queueID)
		set[d.EventID] = true
	}
	return set
}

// allEvents reads every retained event of the topic with EventRead.
func (e *env) allEvents(tp store.Topic) map[string]store.Event {
	e.t.Helper()
	out := map[string]store.Event{}
	for p := range tp.Partitions {
		evs, _ := e.read(store.ReadParams{Topic: tp, Partition: p, Limit: 1 << 20})
		for _, ev := range evs {
			out[ev.ID] = ev
		}
	}
	return out
}

// requireBodyIsEvent checks that a delivery carries the event as EventRead
// returns it.
func requireBodyIsEvent(t *testing.T, d deliveredEvent, ev store.Event) {
	t.Helper()
	require.Equal(t, ev.ID, d.ID)
	require.Equal(t, ev.Type, d.Type, "event %s", ev.ID)
	require.Equal(t, ev.Key, d.Key, "event %s", ev.ID)
	require.Equal(t, ev.Partition, d.Partition, "event %s", ev.ID)
	require.Equal(t, ev.Offset, d.Offset, "event %s", ev.ID)
	require.Equal(t, ev.PublishedAt.UTC().Format("2006-01-02T15:04:05.000000Z"), d.PublishedAt, "event %s", ev.ID)
	if ev.Data == nil {
		require.Equal(t, "null", string(d.Data), "event %s", ev.ID)
	} else {
		require.JSONEq(t, string(ev.Data), string(d.Data), "event %s", ev.ID)
	}
	attrs := ev.Attributes
	if attrs == nil {
		attrs = json.RawMessage(`{}`)
	}
	require.JSONEq(t, string(attrs), string(d.Attributes), "event %s", ev.ID)
}

func setOf(ids ...string) map[string]bool {
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// setDiff lists, sorted, the members of a missing from b.
func setDiff(a, b map[string]bool) []string {
	var out []string
	for id := range a {
		if !b[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func requireSameSet(t *testing.T, want, got map[string]bool, what string) {
	t.Helper()
	missing, extra := setDiff(want, got), setDiff(got, want)
	const show = 10
	require.True(t, len(missing) == 0 && len(extra) == 0,
		"%s: %d expected events not delivered (e.g. %v), %d delivered that should not be (e.g. %v)",
		what, len(missing), missing[:min(show, len(missing))], len(extra), extra[:min(show, len(extra))])
}

// fanEvent is an event the fan-out test published, with what its
// subscriptions' predicates look at.
type fanEvent struct {
	id     string
	typ    string
	key    *string
	region string // "" = no attributes
	n      string // JSON literal of data.n; "" = no data
	vip    string // JSON literal of data.flags.vip
}

// numberIn reports whether the JSON literal lit is a number equal to one
// of vals.
func numberIn(lit string, vals ...int64) bool {
	r, ok := new(big.Rat).SetString(lit)
	if !ok || strings.HasPrefix(lit, `"`) {
		return false
	}
	for _, v := range vals {
		if r.Cmp(big.NewRat(v, 1)) == 0 {
			return true
		}
	}
	return false
}

// fanSub is a subscription of the fan-out test and an independent Go
// statement of what its filter selects.
type fanSub struct {
	name    string
	filter  string
	ordered bool
	match   func(fanEvent) bool
}

var (
	fanTypes   = []string{"order", "order.created", "order.item.added", "user.created", "user.deleted", "payment.created", "audit"}
	fanRegions = []string{"eu", "us", "ap"}
	fanNs      = []string{`1`, `2`, `3`, `"3"`, `4.0`, `3e0`, `null`, `30e-1`}
	fanVips    = []string{`true`, `false`, `"true"`}

	fanFlipA = fanSub{name: "flip", filter: `{"types":["user.*"]}`,
		match: func(ev fanEvent) bool { return strings.HasPrefix(ev.typ, "user.") }}
	fanFlipB = fanSub{name: "flip", filter: `{"attributes":{"region":["us"]}}`,
		match: func(ev fanEvent) bool { return ev.region == "us" }}
)

// deleteSubscription deletes the subscription and its deliveries in one
// transaction and appends its id to ids.
func (e *env) deleteSubscription(tp store.Topic, name string, ids *[]int64) error {
	return pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		id, err := store.SubscriptionDelete(e.ctx, tx, tp.ID, name)
		if err != nil {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		*ids = append(*ids, id)
		for {
			n, err := store.QueueDeleteContent(e.ctx, tx, id, 100000)
			if err != nil || n == 0 {
				return err
			}
		}
	})
}

// assertNoErr reports err as a test error (from any goroutine) and says
// whether there was none.
func assertNoErr(t *testing.T, err error, what string) bool {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return false
	}
	return true
}

// keyTracker follows the deliveries of an ordered subscription: it fails
// the test when a key's delivery is claimed while another of the key is
// held, and records each key's delivery order (offsets).
type keyTracker struct {
	t *testing.T
	heldGroups
	order map[string][]int64
	acked int
}

func (k *keyTracker) claimed(msgs []store.Message) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range msgs {
		var ev deliveredEvent
		if err := json.Unmarshal(m.Body, &ev); err != nil {
			k.t.Errorf("body %s: %v", m.Body, err)
			continue
		}
		if ev.Key == nil {
			if m.Group != nil {
				k.t.Errorf("keyless event %s delivered in group %s", ev.ID, *m.Group)
			}
			continue
		}
		if m.Group == nil || *m.Group != *ev.Key {
			k.t.Errorf("event %s of key %s delivered in group %v", ev.ID, *ev.Key, m.Group)
			continue
		}
		if other, ok := k.held[*ev.Key]; ok {
			k.t.Errorf("key %s: delivery %d claimed while %d is in flight", *ev.Key, m.ID, other)
		}
		k.held[*ev.Key] = m.ID
		k.order[*ev.Key] = append(k.order[*ev.Key], ev.Offset)
	}
}

// An ordered subscription delivers the events of a key one at a time, in
// offset (= publish) order, while publishers and consumers run at once.
func TestSubscriptionOrderedDeliveryPerKey(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "ordered", 4)
	sub, _ := e.subscribe(tp, "o", `{"types":["#.tick"]}`, store.SubscriptionPatch{Ordered: ptr(true)})

	const (
		publishers = 4
		requests   = 30
	)
	var (
		mu         sync.Mutex
		published  = map[string][]int64{} // key → offsets in publish order
		matching   atomic.Int64
		pubsDone   atomic.Bool
		pubWG      sync.WaitGroup
		consumerWG sync.WaitGroup
	)
	for g := range publishers {
		pubWG.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for r := range requests {
				var batch []store.PublishEvent
				for i := range 1 + rng.IntN(4) {
					ev := store.PublishEvent{ID: fmt.Sprintf("g%d-r%d-%d", g, r, i), Type: "clock.tick"}
					switch rng.IntN(10) {
					case 0:
						ev.Type = "clock.tock" // not selected
						ev.Key = ptr(fmt.Sprintf("g%d-k%d", g, rng.IntN(10)))
					case 1: // keyless: unordered
					default:
						ev.Key = ptr(fmt.Sprintf("g%d-k%d", g, rng.IntN(10)))
					}
					batch = append(batch, ev)
				}
				res, _, err := store.EventPublish(e.ctx, e.pool, tp, batch)
				if !assertNoErr(t, err, "publish") {
					return
				}
				mu.Lock()
				for i, ev := range batch {
					if ev.Type != "clock.tick" {
						continue
					}
					matching.Add(1)
					if ev.Key != nil {
						published[*ev.Key] = append(published[*ev.Key], res[i].Offset)
					}
				}
				mu.Unlock()
			}
		})
	}
	go func() {
		pubWG.Wait()
		pubsDone.Store(true)
	}()

	tracker := &keyTracker{t: t, heldGroups: newHeldGroups(), order: map[string][]int64{}}
	var acked atomic.Int64
	deadline := time.Now().Add(30 * time.Second)
	for range 4 {
		consumerWG.Go(func() {
			for {
				done := pubsDone.Load() // before the claim: all published
				msgs, _, err := store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: sub.Queue, Max: 5, VisibilityTimeout: time.Minute})
				if !assertNoErr(t, err, "claim") {
					return
				}
				if len(msgs) == 0 {
					if done && acked.Load() == matching.Load() {
						return
					}
					if time.Now().After(deadline) {
						t.Errorf("stuck: %d of %d acked", acked.Load(), matching.Load())
						return
					}
					pause(2 * time.Millisecond)
					continue
				}
				tracker.claimed(msgs)
				tracker.releasing(msgs)
				res, _, err := store.MessageAck(e.ctx, e.pool, sub.ID, receipts(msgs))
				if !assertNoErr(t, err, "ack") {
					return
				}
				for _, r := range res {
					if !r.OK {
						t.Errorf("ack of %d refused", r.Receipt.MessageID)
					}
				}
				acked.Add(int64(len(msgs)))
			}
		})
	}
	consumerWG.Wait()
	require.False(t, t.Failed())
	require.Equal(t, matching.Load(), acked.Load())
	require.Zero(t, e.live(sub.Queue))
	for key, offs := range published {
		require.True(t, slices.IsSorted(offs), "key %s: offsets %v do not follow publish order", key, offs)
		require.Equal(t, offs, tracker.order[key], "key %s delivered out of order", key)
	}
	require.Len(t, tracker.order, len(published))
}

// A subscription deleted while publishes run: once the delete committed,
// no publish writes to it, including those that read the subscriptions
// before the delete and waited for it.
func TestSubscriptionDeleteStopsPublishes(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "del", 2)
	sub, _ := e.subscribe(tp, "doomed", ``, store.SubscriptionPatch{})
	keep, _ := e.subscribe(tp, "kept", ``, store.SubscriptionPatch{})

	pubPool := e.newNamedPool(8, "delpub")
	var (
		deleted   atomic.Bool
		published atomic.Int64
		wg        sync.WaitGroup
		started   = make(chan struct{}, 4)
	)
	for g := range 4 {
		wg.Go(func() {
			after := 0 // publishes started after the delete committed
			for i := 0; after < 20; i++ {
				if deleted.Load() {
					after++
				}
				_, _, err := store.EventPublish(e.ctx, pubPool, tp, []store.PublishEvent{
					{ID: fmt.Sprintf("g%d-%d", g, i), Type: "t", Key: ptr(fmt.Sprintf("k%d", i%3))},
				})
				if !assertNoErr(t, err, "publish") {
					return
				}
				published.Add(1)
				if i == 2 {
					started <- struct{}{}
				}
			}
		})
	}
	for range 4 {
		<-started
	}

	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	id, err := store.SubscriptionDelete(e.ctx, tx, tp.ID, "doomed")
	require.NoError(t, err)
	require.Equal(t, sub.ID, id)
	// A publisher now waits for a partition the delete holds, having read
	// the subscriptions before the delete.
	e.activityWaitingEventually("delpub")
	require.NoError(t, tx.Commit(e.ctx))
	atDelete := e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, sub.ID)
	deleted.Store(true)
	wg.Wait()
	require.False(t, t.Failed())

	require.Equal(t, atDelete, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, sub.ID),
		"deliveries written to a deleted subscription")
	// The other subscription got every event.
	require.Equal(t, published.Load(), e.live(keep.Queue))
	_, err = store.SubscriptionGet(e.ctx, e.pool, tp.ID, "doomed")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// A delivery holds its own copy of the event: it can still be received,
// intact, after the event left the topic's log.
func TestSubscriptionDeliverySurvivesEventRetention(t *testing.T) {
	t.Parallel()
	e, tp := newTopicEnv(t, "ret", 2)
	plain, _ := e.subscribe(tp, "plain", ``, store.SubscriptionPatch{})
	ordered, _ := e.subscribe(tp, "ordered", ``, store.SubscriptionPatch{Ordered: ptr(true)})
	e.publish(tp,
		store.PublishEvent{ID: "x", Type: "order.created", Key: ptr("k"), Data: json.RawMessage(`{"n":1.50,"s":"é"}`),
			Attributes: json.RawMessage(`{"region":"eu"}`)},
		store.PublishEvent{ID: "y", Type: "order.paid", Key: ptr("k")},
		store.PublishEvent{ID: "z", Type: "ping"})
	logged := e.allEvents(tp)
	require.Len(t, logged, 3)

	_, err := e.pool.Exec(e.ctx, `UPDATE ferry.events SET published_at = now() - interval '30 days' WHERE topic_id = $1`, tp.ID)
	require.NoError(t, err)
	n, err := store.EventExpire(e.ctx, e.pool, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	require.Empty(t, e.allEvents(tp))

	for _, s := range []store.Subscription{plain, ordered} {
		got := map[string]bool{}
		for len(got) < 3 {
			msgs := e.claim(s.Queue, 10, time.Minute)
			require.NotEmpty(t, msgs, "subscription %s: %v received so far", s.Name, got)
			for _, m := range msgs {
				require.NotNil(t, m.EventID)
				var body deliveredEvent
				require.NoError(t, json.Unmarshal(m.Body, &body))
				require.Equal(t, *m.EventID, body.ID)
				requireBodyIsEvent(t, body, logged[body.ID])
				require.True(t, m.SentAt.Equal(logged[body.ID].PublishedAt), "sent_at is the event's published_at")
				got[body.ID] = true
			}
			require.Equal(t, slices.Repeat([]bool{true}, len(msgs)), e.ack(s.Queue, receipts(msgs)...))
		}
		requireSameSet(t, setOf("x", "y", "z"), got, s.Name)
	}
}

// A subscription change must be ordered with every publish, also one to a
// partition that a concurrent TopicUpsert is adding. The change
// (lockTopicForSubscriptions) locks the partition rows its snapshot sees,
// then bumps subs_version; when the topic grows meanwhile, the new
// partition escapes its locks: a publish to it passes the version check
// before the change commits and can commit after it, writing deliveries
// to the deleted subscription.
//
// The interleaving, made deterministic: TopicUpsert (1 → 2 partitions) is
// held after inserting partition 1, holding the topic row; the delete
// locks partition 0 and waits for the topic row; the upsert commits and
// the delete deletes the subscription; a publish to partition 1 reads the
// subscriptions, locks partition 1, checks the version (still the old one)
// and waits for a group lock the test holds (any wait between the check
// and the commit would do); the delete commits; the publish goes on. The
// control: the same with two partitions from the start, where the publish
// waits for the delete's partition lock and starts again.
func TestSubscriptionDeleteRacesPartitionGrowth(t *testing.T) {
	t.Parallel()
	for _, grow := range []bool{false, true} {
		t.Run(fmt.Sprintf("grow=%v", grow), func(t *testing.T) {
			t.Parallel()
			testDeleteRacesPartitionGrowth(t, grow)
		})
	}
}

func testDeleteRacesPartitionGrowth(t *testing.T, grow bool) {
	e := newEnv(t)
	parts := 2
	if grow {
		parts = 1
	}
	tp := e.topic("grow", store.TopicPatch{Partitions: ptr(parts)})
	sub, _ := e.subscribe(tp, "doomed", ``, store.SubscriptionPatch{Ordered: ptr(true)})
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); store.PartitionForKey(k, 2) == 1 {
			key = k
		}
	}
	holder, err := e.pool.Acquire(e.ctx)
	require.NoError(t, err)
	defer holder.Release()

	const growKey = 0x67726f77 // "grow"
	grown := make(chan store.Topic, 1)
	if grow {
		_, err := e.pool.Exec(e.ctx, `
			CREATE FUNCTION public.test_hold_growth() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN PERFORM pg_advisory_xact_lock_shared(`+fmt.Sprint(growKey)+`); RETURN NULL; END $$;
			CREATE TRIGGER test_hold_growth AFTER INSERT ON ferry.topic_partitions
				FOR EACH STATEMENT EXECUTE FUNCTION public.test_hold_growth();`)
		require.NoError(t, err)
		_, err = holder.Exec(e.ctx, `SELECT pg_advisory_lock($1)`, growKey)
		require.NoError(t, err)
		// The topic grows; held before it commits, holding the topic row.
		growPool := e.newNamedPool(2, "grow")
		go func() {
			tp2, _, err := store.TopicUpsert(e.ctx, growPool, tp.Name, store.TopicPatch{Partitions: ptr(2)})
			assertNoErr(t, err, "grow")
			grown <- tp2
		}()
		e.activityWaitingEventually("grow")
	} else {
		grown <- tp
	}

	// The delete locks the partitions it sees (and, while the topic
	// grows, waits for the topic row).
	changePool := e.newNamedPool(2, "change")
	tx, err := changePool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	deleted := make(chan error, 1)
	go func() {
		_, err := store.SubscriptionDelete(e.ctx, tx, tp.ID, "doomed")
		deleted <- err
	}()
	if grow {
		e.activityWaitingEventually("change")
		_, err = holder.Exec(e.ctx, `SELECT pg_advisory_unlock($1)`, growKey)
		require.NoError(t, err)
	}
	tp2 := <-grown
	require.Equal(t, 2, tp2.Partitions)
	require.NoError(t, <-deleted)

	// The publish to partition 1 waits: for the key's group, held by the
	// test, after its version check (grow), or for the partition, held
	// by the delete (control).
	_, err = holder.Exec(e.ctx, `SELECT pg_advisory_lock(ferry.group_lock_key($1, $2))`, sub.ID, key)
	require.NoError(t, err)
	pubPool := e.newNamedPool(2, "pub")
	published := make(chan error, 1)
	go func() {
		_, _, err := store.EventPublish(e.ctx, pubPool, tp2, []store.PublishEvent{{ID: "late", Type: "t", Key: &key}})
		published <- err
	}()
	e.activityWaitingEventually("pub")

	require.NoError(t, tx.Commit(e.ctx))
	atDelete := e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, sub.ID)
	_, err = holder.Exec(e.ctx, `SELECT pg_advisory_unlock(ferry.group_lock_key($1, $2))`, sub.ID, key)
	require.NoError(t, err)
	require.NoError(t, <-published)

	require.Zero(t, atDelete)
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, sub.ID),
		"a publish committed after the delete wrote to the deleted subscription")
	require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
}
