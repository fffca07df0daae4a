package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// TestLongPollAcrossInstances: a receive waiting on server A returns soon
// after a send through server B on the same database. Both poll only every
// 30 s, so only the Postgres NOTIFY can explain a prompt return.
func TestLongPollAcrossInstances(t *testing.T) {
	t.Parallel()
	a := ferrytest.Start(t, withPoll(30*time.Second))
	b := ferrytest.StartOn(t, a.DatabaseURL, withPoll(30*time.Second))
	putQueue(t, a, "lp", nil)

	for round := range 3 {
		done := make(chan asyncResult, 1)
		go func() { done <- doAsync(a, "POST", "/v1/queues/lp/receive", map[string]any{"wait_seconds": 5}) }()
		// Let the receive park; a send before that would be claimed at once
		// and prove nothing.
		time.Sleep(300 * time.Millisecond)
		select {
		case res := <-done:
			t.Fatalf("round %d: the long poll returned before any send: %d %s", round, res.status, res.body)
		default:
		}
		sent := send(t, b, "lp", msg(round))
		sentAt := time.Now()
		res := <-done
		got, err := decodeReceived(res)
		require.NoError(t, err)
		require.Equal(t, []string{sent[0].ID}, msgIDs(got), "round %d", round)
		waited := time.Since(sentAt)
		require.Less(t, waited, 1500*time.Millisecond, "round %d: the wake-up must travel through NOTIFY, not a poll", round)
		ack(t, a, "lp", receipts(got)...)
	}
}

func TestLongPollSameInstanceAndTimeout(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, withPoll(30*time.Second))
	putQueue(t, env, "lp", nil)

	t.Run("wakes on a local send", func(t *testing.T) {
		env := forTest(env, t)
		done := make(chan asyncResult, 1)
		go func() {
			done <- doAsync(env, "POST", "/v1/queues/lp/receive", map[string]any{"wait_seconds": 5, "max_messages": 10})
		}()
		time.Sleep(300 * time.Millisecond)
		sent := send(t, env, "lp", msg("hi"))
		sentAt := time.Now()
		got, err := decodeReceived(<-done)
		require.NoError(t, err)
		require.Equal(t, []string{sent[0].ID}, msgIDs(got))
		require.Less(t, time.Since(sentAt), time.Second)
		ack(t, env, "lp", receipts(got)...)
	})

	t.Run("empty queue returns [] at the end of the wait", func(t *testing.T) {
		env := forTest(env, t)
		start := time.Now()
		r := env.Do("POST", "/v1/queues/lp/receive", map[string]any{"wait_seconds": 1})
		took := time.Since(start)
		require.Equal(t, http.StatusOK, r.Status)
		require.JSONEq(t, `{"messages":[]}`, string(r.Body))
		require.GreaterOrEqual(t, took, 900*time.Millisecond)
		require.Less(t, took, 3*time.Second)
	})

	t.Run("wait_seconds 0 returns at once", func(t *testing.T) {
		env := forTest(env, t)
		start := time.Now()
		require.Empty(t, receive(t, env, "lp", map[string]any{"wait_seconds": 0}))
		require.Less(t, time.Since(start), 500*time.Millisecond)
	})
}

// TestLongPollSeesDelayedMessage: a message that becomes visible by time
// (no send to wake anyone) reaches a waiting receive through the fallback
// poll.
func TestLongPollSeesDelayedMessage(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t) // FallbackPoll 1 s
	putQueue(t, env, "lpd", nil)
	sent := send(t, env, "lpd", msg("soon", "delay_seconds", 1))
	start := time.Now()
	got := receive(t, env, "lpd", map[string]any{"wait_seconds": 10})
	require.Equal(t, []string{sent[0].ID}, msgIDs(got))
	require.Less(t, time.Since(start), 4*time.Second)
}

// TestRestartLosesNothing: 200 messages, 50 of them in flight, a graceful
// stop and a new server on the same database. Everything is delivered and
// acked exactly once; only the 50 whose lease expired are seen twice.
func TestRestartLosesNothing(t *testing.T) {
	t.Parallel()
	first := ferrytest.Start(t)
	putQueue(t, first, "durable", nil)
	const total = 200
	var all []string
	for b := range 2 {
		batch := make([]map[string]any, total/2)
		for i := range batch {
			batch[i] = msg(b*total/2 + i)
		}
		all = append(all, ids(send(t, first, "durable", batch...))...)
	}
	require.Len(t, all, total)

	var leased []client.Message
	for len(leased) < 50 {
		leased = append(leased, receive(t, first, "durable",
			map[string]any{"max_messages": 50 - len(leased), "visibility_timeout_seconds": 1})...)
	}
	first.Stop()

	second := ferrytest.StartOn(t, first.DatabaseURL)
	s := stats(t, second, "durable")
	require.EqualValues(t, total, s.Available+s.InFlight, "all 200 still there after the restart: %+v", s)

	seen := map[string]int{}
	for _, m := range leased {
		seen[m.ID]++
	}
	acked := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(acked) < total {
		require.True(t, time.Now().Before(deadline), "drained %d of %d", len(acked), total)
		got := receive(t, second, "durable", map[string]any{"max_messages": 100, "wait_seconds": 2, "visibility_timeout_seconds": 60})
		if len(got) == 0 {
			continue
		}
		for _, m := range got {
			seen[m.ID]++
		}
		statuses := ack(t, second, "durable", receipts(got)...)
		for i, st := range statuses {
			require.Equal(t, "ok", st, "ack of %s", got[i].ID)
			require.False(t, acked[got[i].ID], "%s acked twice", got[i].ID)
			acked[got[i].ID] = true
		}
	}
	leasedSet := map[string]bool{}
	for _, m := range leased {
		leasedSet[m.ID] = true
	}
	for _, id := range all {
		require.True(t, acked[id], "message %s was never delivered", id)
		want := 1
		if leasedSet[id] {
			want = 2 // its first lease expired across the restart
		}
		require.Equal(t, want, seen[id], "deliveries of %s", id)
	}
	require.Len(t, acked, total)
	// The old in-flight receipts are stale; nothing is left.
	require.Equal(t, repeat("stale", 3), ack(t, second, "durable", receipts(leased[:3])...))
	require.Equal(t, client.QueueStats{}, stats(t, second, "durable"))
}

// TestShutdownEndsLongPolls: a graceful stop answers a pending long poll
// with 200 [] at once instead of holding shutdown for its wait.
func TestShutdownEndsLongPolls(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, withPoll(30*time.Second))
	putQueue(t, env, "bye", nil)
	const polls = 3
	done := make(chan asyncResult, polls)
	for range polls {
		go func() { done <- doAsync(env, "POST", "/v1/queues/bye/receive", map[string]any{"wait_seconds": 20}) }()
	}
	time.Sleep(300 * time.Millisecond) // let them park
	stopStart := time.Now()
	env.Stop()
	require.Less(t, time.Since(stopStart), 5*time.Second, "shutdown was held up")
	for range polls {
		select {
		case res := <-done:
			requireOK(t, res)
			require.JSONEq(t, `{"messages":[]}`, string(res.body))
			require.Less(t, res.took, 5*time.Second)
		case <-time.After(10 * time.Second):
			t.Fatal("a long poll did not return after shutdown")
		}
	}
}

// TestTwoInstancesGroupsAndNoDoubleDelivery: consumers on two servers drain
// one queue with groups. Each message is delivered once; within a group one
// at a time and in send order.
func TestTwoInstancesGroupsAndNoDoubleDelivery(t *testing.T) {
	t.Parallel()
	a := ferrytest.Start(t)
	b := ferrytest.StartOn(t, a.DatabaseURL)
	putQueue(t, a, "shared", map[string]any{"visibility_timeout_seconds": 60})

	const groups, perGroup, ungrouped = 8, 25, 40
	type item struct {
		G string `json:"g"`
		N int    `json:"n"`
	}
	// Sent interleaved, in several batches through both servers, in order
	// per group (each batch commits before the next is sent).
	var batch []map[string]any
	total := 0
	flush := func(env *ferrytest.Env) {
		if len(batch) > 0 {
			send(t, env, "shared", batch...)
			total += len(batch)
			batch = nil
		}
	}
	for n := range perGroup {
		for g := range groups {
			batch = append(batch, msg(item{G: fmt.Sprint("g", g), N: n}, "group", fmt.Sprint("g", g)))
		}
		if n%5 == 4 {
			flush([]*ferrytest.Env{a, b}[n%2])
		}
	}
	flush(a)
	for n := range ungrouped {
		batch = append(batch, msg(item{N: n}))
	}
	flush(b)
	require.Equal(t, groups*perGroup+ungrouped, total)

	var (
		mu        sync.Mutex
		holding   = map[string]string{} // group → message id held by a consumer
		order     = map[string][]int{}  // group → n in delivery order
		delivered = map[string]int{}    // message id → deliveries
		failures  []string
		acked     atomic.Int64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for c := range 8 {
		env := []*ferrytest.Env{a, b}[c%2]
		wg.Go(func() {
			for ctx.Err() == nil && acked.Load() < int64(total) {
				res := doAsync(env, "POST", "/v1/queues/shared/receive", map[string]any{"max_messages": 5, "wait_seconds": 1})
				got, err := decodeReceived(res)
				if err != nil {
					fail("consumer %d: %v", c, err)
					return
				}
				mu.Lock()
				for _, m := range got {
					delivered[m.ID]++
					if m.Group == nil {
						continue
					}
					if other, ok := holding[*m.Group]; ok {
						failures = append(failures, fmt.Sprintf("group %s: %s delivered while %s is held", *m.Group, m.ID, other))
					}
					holding[*m.Group] = m.ID
					var it item
					if err := json.Unmarshal(m.Body, &it); err != nil {
						failures = append(failures, err.Error())
					}
					order[*m.Group] = append(order[*m.Group], it.N)
				}
				mu.Unlock()
				if len(got) == 0 {
					continue
				}
				time.Sleep(time.Millisecond) // hold the messages a little, as a worker would
				mu.Lock()
				// Released before the ack is sent: the next of the group
				// can only be delivered after the ack commits.
				for _, m := range got {
					if m.Group != nil {
						delete(holding, *m.Group)
					}
				}
				mu.Unlock()
				rs := make([]string, len(got))
				for i, m := range got {
					rs[i] = m.Receipt
				}
				res = doAsync(env, "POST", "/v1/queues/shared/ack", map[string]any{"receipts": rs})
				if res.err != nil || res.status != http.StatusOK {
					fail("consumer %d: ack: %v %d %s", c, res.err, res.status, res.body)
					return
				}
				var out struct {
					Results []client.ReceiptResult `json:"results"`
				}
				if err := json.Unmarshal(res.body, &out); err != nil {
					fail("consumer %d: ack: %v", c, err)
					return
				}
				for _, r := range out.Results {
					if r.Status != "ok" {
						fail("consumer %d: ack %s: %s", c, r.Receipt, r.Status)
					}
				}
				acked.Add(int64(len(got)))
			}
		})
	}
	wg.Wait()
	require.Empty(t, failures)
	require.EqualValues(t, total, acked.Load(), "drained everything in time")
	require.Len(t, delivered, total)
	for id, n := range delivered {
		require.Equal(t, 1, n, "message %s delivered %d times", id, n)
	}
	want := make([]int, perGroup)
	for i := range want {
		want[i] = i
	}
	for g := range groups {
		require.Equal(t, want, order[fmt.Sprint("g", g)], "delivery order of group g%d", g)
	}
	require.Equal(t, client.QueueStats{}, stats(t, b, "shared"))
}

// TestSettleWakesLongPoll: every write that makes a message claimable at
// once (an ack promoting a group's next message, a nack without delay, a
// nack dead-lettering a group's head, a redrive, a subscription seek)
// answers a receive parked on that queue promptly. The server polls only
// every 30 s and the receive waits 10 s, so only the wake-up can explain a
// prompt answer with the message.
func TestSettleWakesLongPoll(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	env := ferrytest.StartOn(t, withAppName(t, dbURL, "ferry-wake"), withPoll(30*time.Second))
	lease := map[string]any{"visibility_timeout_seconds": 60}

	// parked starts a receive at path, waits until it has found nothing
	// and waits, runs write, and returns the ids the receive answered.
	parked := func(t *testing.T, path string, write func()) []string {
		t.Helper()
		done := startParked(t, env, func() asyncResult {
			return doAsync(env, "POST", path, map[string]any{"wait_seconds": 10, "max_messages": 10})
		})
		write()
		res := <-done
		got, err := decodeReceived(res)
		require.NoError(t, err)
		require.Less(t, res.took, 5*time.Second, "woken, not timed out: %s", res.body)
		return msgIDs(got)
	}

	t.Run("ack promotes the next of a group", func(t *testing.T) {
		putQueue(t, env, "w-ack", nil)
		sent := send(t, env, "w-ack", msg(1, "group", "g"), msg(2, "group", "g"))
		head := receive(t, env, "w-ack", lease)
		require.Equal(t, []string{sent[0].ID}, msgIDs(head))
		got := parked(t, qpath("w-ack", "/receive"), func() {
			require.Equal(t, []string{"ok"}, ack(t, env, "w-ack", receipts(head)...))
		})
		require.Equal(t, []string{sent[1].ID}, got)
	})

	t.Run("nack without delay", func(t *testing.T) {
		putQueue(t, env, "w-nack", nil)
		sent := send(t, env, "w-nack", msg(1))
		held := receive(t, env, "w-nack", lease)
		got := parked(t, qpath("w-nack", "/receive"), func() {
			require.Equal(t, []string{"ok"}, settle(t, env, "w-nack", "nack", map[string]any{"receipts": receipts(held), "delay_seconds": 0}))
		})
		require.Equal(t, ids(sent), got)
	})

	t.Run("nack dead-letters a group's head", func(t *testing.T) {
		putQueue(t, env, "w-dead", nil)
		sent := send(t, env, "w-dead", msg(1, "group", "g"), msg(2, "group", "g"))
		head := receive(t, env, "w-dead", lease)
		got := parked(t, qpath("w-dead", "/receive"), func() {
			require.Equal(t, []string{"ok"}, settle(t, env, "w-dead", "nack", map[string]any{"receipts": receipts(head), "dead_letter": true}))
		})
		require.Equal(t, []string{sent[1].ID}, got)
	})

	t.Run("redrive", func(t *testing.T) {
		putQueue(t, env, "w-redrive", nil)
		sent := send(t, env, "w-redrive", msg(1))
		held := receive(t, env, "w-redrive", lease)
		require.Equal(t, []string{"ok"}, settle(t, env, "w-redrive", "nack", map[string]any{"receipts": receipts(held), "dead_letter": true}))
		got := parked(t, qpath("w-redrive", "/receive"), func() {
			r := env.Do("POST", qpath("w-redrive", "/dead-letters/redrive"), map[string]any{"limit": 10})
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			require.JSONEq(t, `{"redriven":1}`, string(r.Body))
		})
		require.Equal(t, ids(sent), got)
	})

	t.Run("subscription seek", func(t *testing.T) {
		putTopic(t, env, "w-topic", nil, http.StatusCreated)
		putSub(t, env, "w-topic", "s", nil, http.StatusCreated)
		sent := publishEvents(t, env, "w-topic", evt("e"))
		got := receiveSub(t, env, "w-topic", "s", nil)
		require.Equal(t, []string{sent[0].ID}, subIDs(got))
		require.Equal(t, []string{"ok"}, ackSub(t, env, "w-topic", "s", subReceipts(got)...))
		again := parked(t, spath("w-topic", "s", "/receive"), func() { seekSub(t, env, "w-topic", "s", "earliest") })
		require.Equal(t, []string{sent[0].ID}, again)
	})
}
