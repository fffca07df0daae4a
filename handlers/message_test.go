package handlers_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

func TestSendReceiveShapes(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "shapes", nil)

	bodies := []string{
		`{"order_id":"ORD-9912","nested":{"a":[1,2,{"b":null}]}}`,
		`"just a string"`,
		`42`,
		`[1,"two",3.5,true]`,
		`null`,
		`false`,
		`"héllo ✓ <&>"`,
		`{ "spaced" :  [ 1 , 2 ] }`,
	}
	batch := make([]map[string]any, len(bodies))
	for i, b := range bodies {
		batch[i] = msg(json.RawMessage(b))
	}
	batch[0]["attributes"] = map[string]string{"type": "order.created", "region": "eu"}
	batch[0]["group"] = "acct-456"
	batch[0]["dedup_id"] = "evt_7b2f9c"
	batch[1]["delay_seconds"] = 0

	before := time.Now().Add(-5 * time.Second)
	sent := call[struct {
		Messages []client.Sent `json:"messages"`
	}](t, env, "POST", "/v1/queues/shapes/messages", map[string]any{"messages": batch},
		listKeys([]string{"messages"}, keysOf([]string{"id", "duplicate"}, "sent message")), http.StatusCreated)
	require.Len(t, sent.Messages, len(bodies))
	seen := map[string]bool{}
	for _, s := range sent.Messages {
		require.NotEmpty(t, s.ID)
		require.False(t, s.Duplicate)
		require.False(t, seen[s.ID], "ids are unique")
		seen[s.ID] = true
	}
	require.Equal(t, client.QueueStats{Available: int64(len(bodies))}, counts(t, env, "shapes"))

	got := call[struct {
		Messages []client.Message `json:"messages"`
	}](t, env, "POST", "/v1/queues/shapes/receive", map[string]any{"max_messages": 100},
		listKeys([]string{"messages"}, keysOf(receivedKeys, "received message")), http.StatusOK)
	require.Len(t, got.Messages, len(bodies))

	// Each id carries the body sent at its position: ids are in request order.
	byID := map[string]client.Message{}
	for _, m := range got.Messages {
		byID[m.ID] = m
	}
	for i, s := range sent.Messages {
		m, ok := byID[s.ID]
		require.True(t, ok, "id %s of message %d was not received", s.ID, i)
		require.JSONEq(t, bodies[i], string(m.Body), "body of message %d", i)
		require.Equal(t, 1, m.ReceiveCount)
		require.NotEmpty(t, m.Receipt)
		require.True(t, m.SentAt.After(before) && m.SentAt.Before(time.Now().Add(5*time.Second)), "sent_at %v", m.SentAt)
		if i == 0 {
			require.Equal(t, map[string]string{"type": "order.created", "region": "eu"}, m.Attributes)
			require.Equal(t, "acct-456", *m.Group)
			require.Equal(t, "evt_7b2f9c", *m.DedupID)
		} else {
			require.Equal(t, map[string]string{}, m.Attributes, "attributes are {} when none")
			require.Nil(t, m.Group, "group is null when none")
			require.Nil(t, m.DedupID, "dedup_id is null when none")
		}
	}
	require.Equal(t, client.QueueStats{InFlight: int64(len(bodies))}, counts(t, env, "shapes"))

	statuses := ack(t, env, "shapes", receipts(got.Messages)...)
	require.Equal(t, repeat("ok", len(bodies)), statuses)
	require.Equal(t, client.QueueStats{}, stats(t, env, "shapes"))
}

func TestReceiveDefaultsAndLimits(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "d", map[string]any{"visibility_timeout_seconds": 1})

	batch := make([]map[string]any, 150)
	for i := range batch {
		batch[i] = msg(i)
	}
	sent := ids(send(t, env, "d", batch...))

	// No body: max_messages 1, wait 0, the queue's visibility (1 s).
	first := receive(t, env, "d", nil)
	require.Len(t, first, 1)
	require.Equal(t, sent[0], first[0].ID, "claims come in send order")
	// {} is the same.
	second := receive(t, env, "d", map[string]any{})
	require.Len(t, second, 1)
	require.Equal(t, sent[1], second[0].ID)

	// max_messages is an upper bound: 100, then what is left.
	many := receive(t, env, "d", map[string]any{"max_messages": 100, "visibility_timeout_seconds": 60})
	require.Len(t, many, 100)
	require.Equal(t, sent[2:102], msgIDs(many), "claims come in send order")
	rest := receive(t, env, "d", map[string]any{"max_messages": 100, "visibility_timeout_seconds": 60})
	require.Len(t, rest, 48)
	s := stats(t, env, "d")
	require.EqualValues(t, 150, s.InFlight+s.Available)

	// The first two used the queue's 1 s visibility: they come back, with
	// receive_count 2 and new receipts; the old receipts are stale.
	var again []client.Message
	require.Eventually(t, func() bool {
		again = append(again, receive(t, env, "d", map[string]any{"max_messages": 10, "visibility_timeout_seconds": 60})...)
		return len(again) >= 2
	}, 10*time.Second, 100*time.Millisecond)
	require.ElementsMatch(t, []string{sent[0], sent[1]}, msgIDs(again))
	for _, m := range again {
		require.Equal(t, 2, m.ReceiveCount)
	}
	require.Equal(t, []string{"stale", "stale"}, ack(t, env, "d", first[0].Receipt, second[0].Receipt))
	require.Equal(t, []string{"ok", "ok"}, ack(t, env, "d", receipts(again)...))
	// The 148 others were received with visibility 60: still in flight.
	require.Equal(t, int64(148), stats(t, env, "d").InFlight)
}

func TestReceiveEmptyQueue(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "empty", nil)
	r := env.Do("POST", "/v1/queues/empty/receive", map[string]any{"max_messages": 10})
	require.Equal(t, http.StatusOK, r.Status)
	require.JSONEq(t, `{"messages":[]}`, string(r.Body))
}

func TestDedup(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "dd", nil)

	first := send(t, env, "dd", msg("one", "dedup_id", "k1"))
	require.False(t, first[0].Duplicate)

	// The same dedup_id again: the first id, duplicate, nothing enqueued.
	again := send(t, env, "dd", msg("one again", "dedup_id", "k1"))
	require.Equal(t, []client.Sent{{ID: first[0].ID, Duplicate: true}}, again)
	require.EqualValues(t, 1, stats(t, env, "dd").Available)

	// Inside one batch: a repeat is a duplicate of its first occurrence;
	// the results stay in request order.
	b := send(t, env, "dd", msg("a", "dedup_id", "k2"), msg("b"), msg("c", "dedup_id", "k2"), msg("d", "dedup_id", "k1"))
	require.False(t, b[0].Duplicate)
	require.False(t, b[1].Duplicate)
	require.Equal(t, client.Sent{ID: b[0].ID, Duplicate: true}, b[2])
	require.Equal(t, client.Sent{ID: first[0].ID, Duplicate: true}, b[3])
	require.NotEqual(t, b[0].ID, b[1].ID)
	require.EqualValues(t, 3, stats(t, env, "dd").Available)

	// Still a duplicate after the first message was acked.
	got := receive(t, env, "dd", map[string]any{"max_messages": 10})
	require.Len(t, got, 3)
	require.Equal(t, repeat("ok", 3), ack(t, env, "dd", receipts(got)...))
	again = send(t, env, "dd", msg("late", "dedup_id", "k1"))
	require.Equal(t, []client.Sent{{ID: first[0].ID, Duplicate: true}}, again)
	require.Equal(t, client.QueueStats{}, stats(t, env, "dd"))

	// Concurrent identical sends make one message (invariant 4).
	const n = 16
	var wg sync.WaitGroup
	results := make([]asyncResult, n)
	for i := range n {
		wg.Go(func() {
			results[i] = doAsync(env, "POST", "/v1/queues/dd/messages",
				map[string]any{"messages": []any{msg(i, "dedup_id", "race")}})
		})
	}
	wg.Wait()
	var winner string
	fresh := 0
	for _, res := range results {
		out := decodeAsync[struct {
			Messages []client.Sent `json:"messages"`
		}](t, res, http.StatusCreated)
		if winner == "" {
			winner = out.Messages[0].ID
		}
		require.Equal(t, winner, out.Messages[0].ID, "every concurrent duplicate answers the first id")
		if !out.Messages[0].Duplicate {
			fresh++
		}
	}
	require.Equal(t, 1, fresh, "exactly one concurrent send is not a duplicate")
	require.EqualValues(t, 1, stats(t, env, "dd").Available)
}

func TestAckNackExtend(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "s", map[string]any{"max_receives": 10})
	send(t, env, "s", msg(1), msg(2), msg(3), msg(4))
	got := receive(t, env, "s", map[string]any{"max_messages": 4, "visibility_timeout_seconds": 60})
	require.Len(t, got, 4)
	r1, r2, r3, r4 := got[0].Receipt, got[1].Receipt, got[2].Receipt, got[3].Receipt

	// ack: per-item ok/stale, in request order.
	require.Equal(t, []string{"ok"}, ack(t, env, "s", r1))
	require.Equal(t, []string{"stale", "ok"}, ack(t, env, "s", r1, r2))
	require.Equal(t, client.QueueStats{InFlight: 2}, counts(t, env, "s"))

	// extend: ok for a current claim, stale for an acked one.
	require.Equal(t, []string{"ok", "stale"},
		settle(t, env, "s", "extend", map[string]any{"receipts": []string{r3, r1}, "visibility_timeout_seconds": 120}))

	// nack with delay_seconds: not receivable now, receivable after ~1 s.
	nackedAt := time.Now()
	require.Equal(t, []string{"ok", "stale"},
		settle(t, env, "s", "nack", map[string]any{"receipts": []string{r4, r2}, "delay_seconds": 1}))
	require.Empty(t, receive(t, env, "s", map[string]any{"max_messages": 10}))
	s := stats(t, env, "s")
	require.EqualValues(t, 1, s.Delayed)
	require.EqualValues(t, 1, s.InFlight)
	var back []client.Message
	require.Eventually(t, func() bool {
		back = receive(t, env, "s", map[string]any{"max_messages": 10, "visibility_timeout_seconds": 60})
		return len(back) > 0
	}, 10*time.Second, 100*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(nackedAt), 900*time.Millisecond)
	require.Len(t, back, 1)
	require.Equal(t, got[3].ID, back[0].ID)
	require.Equal(t, 2, back[0].ReceiveCount)
	// The nacked receipt is stale now, for every action.
	require.Equal(t, []string{"stale"}, ack(t, env, "s", r4))
	require.Equal(t, []string{"stale"}, settle(t, env, "s", "nack", map[string]any{"receipts": []string{r4}}))
	require.Equal(t, []string{"stale"}, settle(t, env, "s", "extend", map[string]any{"receipts": []string{r4}, "visibility_timeout_seconds": 5}))

	// extend can shorten the lease (to 1 s, the least): the message comes
	// back when it ends, and its receipt goes stale.
	require.Equal(t, []string{"ok"}, settle(t, env, "s", "extend", map[string]any{"receipts": []string{r3}, "visibility_timeout_seconds": 1}))
	again := receive(t, env, "s", map[string]any{"max_messages": 10, "visibility_timeout_seconds": 60, "wait_seconds": 5})
	require.Equal(t, []string{got[2].ID}, msgIDs(again))
	require.Equal(t, 2, again[0].ReceiveCount)
	require.Equal(t, []string{"stale"}, ack(t, env, "s", r3))
	require.Equal(t, []string{"ok", "ok"}, ack(t, env, "s", again[0].Receipt, back[0].Receipt))
	require.Equal(t, client.QueueStats{}, stats(t, env, "s"))
}

func TestExtendKeepsMessageHidden(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "x", nil)
	send(t, env, "x", msg("m"))
	got := receive(t, env, "x", map[string]any{"visibility_timeout_seconds": 1})
	require.Len(t, got, 1)
	require.Equal(t, []string{"ok"}, settle(t, env, "x", "extend",
		map[string]any{"receipts": []string{got[0].Receipt}, "visibility_timeout_seconds": 10}))
	// Well past the original 1 s lease it is still hidden.
	require.Never(t, func() bool {
		return len(receive(t, env, "x", nil)) > 0
	}, 1800*time.Millisecond, 200*time.Millisecond)
	require.EqualValues(t, 1, stats(t, env, "x").InFlight)
	require.Equal(t, []string{"ok"}, ack(t, env, "x", got[0].Receipt), "the extended receipt stays current")
}

func TestNackBackoffAndDeadLetters(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)

	t.Run("backoff without delay_seconds", func(t *testing.T) {
		env := forTest(env, t)
		// retry_min = retry_max = 0: the backoff is zero, the message is back at once.
		putQueue(t, env, "b0", map[string]any{"retry_min_seconds": 0, "retry_max_seconds": 0})
		send(t, env, "b0", msg("m"))
		got := receive(t, env, "b0", nil)
		require.Len(t, got, 1)
		require.Equal(t, []string{"ok"}, settle(t, env, "b0", "nack", map[string]any{"receipts": receipts(got)}))
		again := receive(t, env, "b0", nil)
		require.Equal(t, msgIDs(got), msgIDs(again))
		require.Equal(t, 2, again[0].ReceiveCount)

		// The default backoff (1..300 s, with jitter) hides it for a while.
		putQueue(t, env, "b1", map[string]any{"retry_min_seconds": 5, "retry_max_seconds": 10})
		send(t, env, "b1", msg("m"))
		got = receive(t, env, "b1", nil)
		require.Equal(t, []string{"ok"}, settle(t, env, "b1", "nack", map[string]any{"receipts": receipts(got)}))
		require.Empty(t, receive(t, env, "b1", nil))
		require.EqualValues(t, 1, stats(t, env, "b1").Delayed)
	})

	t.Run("dead_letter true with error", func(t *testing.T) {
		env := forTest(env, t)
		putQueue(t, env, "dl", nil)
		sent := send(t, env, "dl", msg(map[string]any{"k": "v"}, "attributes", map[string]string{"a": "b"}, "group", "g1"), msg("keep"))
		got := receive(t, env, "dl", nil)
		require.Equal(t, sent[0].ID, got[0].ID)
		require.Equal(t, []string{"ok"}, settle(t, env, "dl", "nack",
			map[string]any{"receipts": receipts(got), "error": "permanent: bad input", "dead_letter": true}))
		require.Equal(t, []string{"stale"}, ack(t, env, "dl", got[0].Receipt))

		page := call[client.DeadLetterPage](t, env, "GET", "/v1/queues/dl/dead-letters", nil, func(t testing.TB, top map[string]any) {
			t.Helper()
			listKeys([]string{"messages", "next"}, keysOf(deadLetterKeys, "dead letter"))(t, top)
			require.Nil(t, top["next"])
		}, http.StatusOK)
		require.Len(t, page.Messages, 1)
		d := page.Messages[0]
		require.Equal(t, sent[0].ID, d.ID)
		require.JSONEq(t, `{"k":"v"}`, string(d.Body))
		require.Equal(t, map[string]string{"a": "b"}, d.Attributes)
		require.Equal(t, "g1", *d.Group)
		require.Equal(t, 1, d.ReceiveCount)
		require.Equal(t, "permanent: bad input", *d.LastError)
		require.True(t, got[0].SentAt.Equal(d.SentAt), "sent_at kept: %v vs %v", got[0].SentAt, d.SentAt)
		require.False(t, d.DeadLetteredAt.Before(d.SentAt))

		s := stats(t, env, "dl")
		require.EqualValues(t, 1, s.DeadLetters)
		require.EqualValues(t, 1, s.Available)
		require.EqualValues(t, 0, s.InFlight)
	})

	t.Run("max_receives by nack keeps the last error", func(t *testing.T) {
		env := forTest(env, t)
		putQueue(t, env, "mr", map[string]any{"max_receives": 2})
		sent := send(t, env, "mr", msg("poison"))
		got := receive(t, env, "mr", nil)
		require.Equal(t, []string{"ok"}, settle(t, env, "mr", "nack",
			map[string]any{"receipts": receipts(got), "delay_seconds": 0, "error": "first"}))
		got = receive(t, env, "mr", nil)
		require.Len(t, got, 1)
		require.Equal(t, 2, got[0].ReceiveCount)
		// The last allowed receive: a nack dead-letters it at once.
		require.Equal(t, []string{"ok"}, settle(t, env, "mr", "nack",
			map[string]any{"receipts": receipts(got), "delay_seconds": 0, "error": "second"}))
		require.Empty(t, receive(t, env, "mr", nil))
		page := deadLetters(t, env, "mr", "")
		require.Len(t, page.Messages, 1)
		require.Equal(t, sent[0].ID, page.Messages[0].ID)
		require.Equal(t, 2, page.Messages[0].ReceiveCount)
		require.Equal(t, "second", *page.Messages[0].LastError)
	})

	t.Run("max_receives by expired leases", func(t *testing.T) {
		env := forTest(env, t)
		putQueue(t, env, "ex", map[string]any{"max_receives": 3})
		sent := send(t, env, "ex", msg("slow"))
		for i := 1; i <= 3; i++ {
			// Each waits for the previous lease (1 s) to end.
			got := receive(t, env, "ex", map[string]any{"visibility_timeout_seconds": 1, "wait_seconds": 5})
			require.Len(t, got, 1, "receive %d", i)
			require.Equal(t, i, got[0].ReceiveCount)
		}
		// A 4th delivery would exceed max_receives: dead-lettered instead,
		// by the first claim after the last lease ends.
		page := waitDeadLettered(t, env, "ex")
		require.Equal(t, sent[0].ID, page.Messages[0].ID)
		require.Equal(t, 3, page.Messages[0].ReceiveCount, "receive_count = max_receives")
		require.Nil(t, page.Messages[0].LastError)
		require.Equal(t, client.QueueStats{DeadLetters: 1}, stats(t, env, "ex"))
	})
}

func TestDelayedDelivery(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)

	// waitFor receives from q until a message comes and returns it and when.
	waitFor := func(t *testing.T, env *ferrytest.Env, q string) (client.Message, time.Time) {
		var got []client.Message
		require.Eventually(t, func() bool {
			got = receive(t, env, q, nil)
			return len(got) > 0
		}, 10*time.Second, 50*time.Millisecond)
		return got[0], time.Now()
	}

	t.Run("delay_seconds", func(t *testing.T) {
		t.Parallel()
		env := forTest(env, t)
		putQueue(t, env, "ds", nil)
		start := time.Now()
		sent := send(t, env, "ds", msg("later", "delay_seconds", 1))
		require.Empty(t, receive(t, env, "ds", nil))
		require.Equal(t, client.QueueStats{Delayed: 1}, counts(t, env, "ds"))
		m, at := waitFor(t, env, "ds")
		require.Equal(t, sent[0].ID, m.ID)
		require.GreaterOrEqual(t, at.Sub(start), 900*time.Millisecond)
	})

	t.Run("deliver_at", func(t *testing.T) {
		t.Parallel()
		env := forTest(env, t)
		putQueue(t, env, "da", nil)
		when := time.Now().Add(2 * time.Second).UTC()
		sent := send(t, env, "da", msg("scheduled", "deliver_at", when.Format(time.RFC3339Nano)),
			msg("past", "deliver_at", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)))
		// A time in the past means now.
		now := receive(t, env, "da", map[string]any{"max_messages": 10})
		require.Equal(t, []string{sent[1].ID}, msgIDs(now))
		require.EqualValues(t, 1, stats(t, env, "da").Delayed)
		m, at := waitFor(t, env, "da")
		require.Equal(t, sent[0].ID, m.ID)
		require.False(t, at.Before(when.Add(-100*time.Millisecond)), "delivered at %v, scheduled for %v", at, when)
	})

	t.Run("queue default delay", func(t *testing.T) {
		t.Parallel()
		env := forTest(env, t)
		putQueue(t, env, "qd", map[string]any{"delay_seconds": 1})
		start := time.Now()
		sent := send(t, env, "qd", msg("default delay"), msg("explicit zero", "delay_seconds", 0))
		// delay_seconds 0 overrides the queue's default.
		now := receive(t, env, "qd", map[string]any{"max_messages": 10})
		require.Equal(t, []string{sent[1].ID}, msgIDs(now))
		m, at := waitFor(t, env, "qd")
		require.Equal(t, sent[0].ID, m.ID)
		require.GreaterOrEqual(t, at.Sub(start), 900*time.Millisecond)
	})
}

func TestGroupsOverHTTP(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "g", nil)
	sent := ids(send(t, env, "g",
		msg("a1", "group", "a"), msg("a2", "group", "a"), msg("b1", "group", "b"), msg("free"), msg("a3", "group", "a")))

	// One per group at a time; ungrouped in parallel.
	got := receive(t, env, "g", map[string]any{"max_messages": 10})
	require.ElementsMatch(t, []string{sent[0], sent[2], sent[3]}, msgIDs(got))
	// Waiting group members count as available.
	require.Equal(t, client.QueueStats{Available: 2, InFlight: 3}, counts(t, env, "g"))
	require.Empty(t, receive(t, env, "g", map[string]any{"max_messages": 10}))

	// A nack does not release the group: the head comes back first.
	byID := map[string]client.Message{}
	for _, m := range got {
		byID[m.ID] = m
	}
	require.Equal(t, []string{"ok"}, settle(t, env, "g", "nack",
		map[string]any{"receipts": []string{byID[sent[0]].Receipt}, "delay_seconds": 0}))
	again := receive(t, env, "g", map[string]any{"max_messages": 10})
	require.Equal(t, []string{sent[0]}, msgIDs(again))

	// Acking the head releases the next of its group, in send order.
	require.Equal(t, []string{"ok"}, ack(t, env, "g", again[0].Receipt))
	next := receive(t, env, "g", map[string]any{"max_messages": 10})
	require.Equal(t, []string{sent[1]}, msgIDs(next))
	require.Equal(t, "a", *next[0].Group)
	// Dead-lettering the head releases the next too.
	require.Equal(t, []string{"ok"}, settle(t, env, "g", "nack",
		map[string]any{"receipts": receipts(next), "dead_letter": true}))
	last := receive(t, env, "g", map[string]any{"max_messages": 10})
	require.Equal(t, []string{sent[4]}, msgIDs(last))
}

func TestStatsAge(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "age", nil)
	require.Equal(t, client.QueueStats{}, stats(t, env, "age"))
	send(t, env, "age", msg("old"))
	require.Eventually(t, func() bool {
		return stats(t, env, "age").OldestAgeSeconds >= 1
	}, 10*time.Second, 100*time.Millisecond)
	got := receive(t, env, "age", nil)
	require.GreaterOrEqual(t, stats(t, env, "age").OldestAgeSeconds, int64(1), "in-flight messages count for age")
	ack(t, env, "age", receipts(got)...)
	require.Equal(t, client.QueueStats{}, stats(t, env, "age"), "0 when empty")
}

func deadIDs(ds []client.DeadLetter) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// TestGroupOrderAcrossSends: a group's messages sent one request after
// another (each answered before the next is sent) are delivered in that
// order. The server has several send workers and pool connections, so
// consecutive sends do not share a database session.
func TestGroupOrderAcrossSends(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "seq", nil)
	const n = 40
	sent := sendEach(t, env, "seq", n, func(i int) map[string]any { return msg(i, "group", "g") })
	var order []int
	var gotIDs []string
	for range n {
		got := receive(t, env, "seq", map[string]any{"max_messages": 10})
		require.Len(t, got, 1, "one message of a group at a time")
		var v int
		require.NoError(t, json.Unmarshal(got[0].Body, &v))
		order = append(order, v)
		gotIDs = append(gotIDs, got[0].ID)
		require.Equal(t, []string{"ok"}, ack(t, env, "seq", got[0].Receipt))
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, order, "a group is delivered in send order")
	require.Equal(t, sent, gotIDs)
}

func TestDedupWindow(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)

	t.Run("expires", func(t *testing.T) {
		t.Parallel()
		env := forTest(env, t)
		putQueue(t, env, "w1", map[string]any{"dedup_window_seconds": 1})
		first := send(t, env, "w1", msg("a", "dedup_id", "k"))
		require.Equal(t, []client.Sent{{ID: first[0].ID, Duplicate: true}}, send(t, env, "w1", msg("b", "dedup_id", "k")))
		var later []client.Sent
		require.Eventually(t, func() bool {
			later = send(t, env, "w1", msg("c", "dedup_id", "k"))
			return !later[0].Duplicate
		}, 10*time.Second, 200*time.Millisecond)
		require.NotEqual(t, first[0].ID, later[0].ID)
		require.EqualValues(t, 2, stats(t, env, "w1").Available)
	})

	t.Run("zero turns dedup off", func(t *testing.T) {
		t.Parallel()
		env := forTest(env, t)
		putQueue(t, env, "w0", map[string]any{"dedup_window_seconds": 0})
		a := send(t, env, "w0", msg("a", "dedup_id", "k"))
		b := send(t, env, "w0", msg("b", "dedup_id", "k"))
		require.False(t, a[0].Duplicate)
		require.False(t, b[0].Duplicate)
		require.NotEqual(t, a[0].ID, b[0].ID)
		require.EqualValues(t, 2, stats(t, env, "w0").Available)
	})
}

// TestLastErrorSurvivesExpiry: a message nacked with an error and then
// dead-lettered by expired leases keeps that error as last_error.
func TestLastErrorSurvivesExpiry(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "le", map[string]any{"max_receives": 2})
	send(t, env, "le", msg("x"))
	got := receive(t, env, "le", nil)
	settle(t, env, "le", "nack", map[string]any{"receipts": receipts(got), "delay_seconds": 0, "error": "upstream timed out"})
	require.Len(t, receive(t, env, "le", map[string]any{"visibility_timeout_seconds": 1}), 1)
	// The lease ends; the next claim dead-letters the message.
	page := waitDeadLettered(t, env, "le")
	require.Equal(t, 2, page.Messages[0].ReceiveCount)
	require.NotNil(t, page.Messages[0].LastError)
	require.Equal(t, "upstream timed out", *page.Messages[0].LastError)
}

// TestConcurrentSettleOneWins: of many concurrent acks and nacks of one
// receipt exactly one is ok (invariant 3: a stale receipt changes nothing).
func TestConcurrentSettleOneWins(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "race", nil)
	for round := range 6 {
		sent := send(t, env, "race", msg(round))
		got := receive(t, env, "race", map[string]any{"visibility_timeout_seconds": 60})
		require.Len(t, got, 1)
		const n = 12
		results := make([]asyncResult, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if i%2 == 0 {
					results[i] = doAsync(env, "POST", "/v1/queues/race/ack", map[string]any{"receipts": []string{got[0].Receipt}})
				} else {
					results[i] = doAsync(env, "POST", "/v1/queues/race/nack",
						map[string]any{"receipts": []string{got[0].Receipt}, "delay_seconds": 0})
				}
			})
		}
		wg.Wait()
		var winners []int
		for i, r := range results {
			out := decodeAsync[struct {
				Results []client.ReceiptResult `json:"results"`
			}](t, r, http.StatusOK)
			require.Len(t, out.Results, 1)
			if out.Results[0].Status == "ok" {
				winners = append(winners, i)
			}
		}
		require.Len(t, winners, 1, "round %d: exactly one settle wins", round)
		if winners[0]%2 == 0 { // the ack won: gone
			require.Equal(t, client.QueueStats{}, stats(t, env, "race"))
			continue
		}
		// The nack won: the message is back, once, and can be acked.
		again := receive(t, env, "race", map[string]any{"max_messages": 10})
		require.Equal(t, []string{sent[0].ID}, msgIDs(again), "round %d", round)
		require.Equal(t, []string{"ok"}, ack(t, env, "race", again[0].Receipt))
		require.Equal(t, client.QueueStats{}, stats(t, env, "race"))
	}
}
