package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/store"
)

// sendAtOnce runs n sends of the same message at the same moment, send i
// through senders[i % len(senders)], and returns every answer.
func sendAtOnce(t *testing.T, senders []*store.Sender, queue string, n int, m store.SendMessage) []store.SendResult {
	t.Helper()
	results, errs := make([]store.SendResult, n), make([]error, n)
	atOnce(n, func(i int) {
		res, _, err := senders[i%len(senders)].Send(context.Background(), queue, []store.SendMessage{m})
		errs[i] = err
		if err == nil && len(res) == 1 {
			results[i] = res[0]
		}
	})
	for i, err := range errs {
		require.NoError(t, err, "send %d", i)
	}
	return results
}

// requireOneOriginal checks the invariant-4 outcome of identical sends: one
// answer is the original, every other a duplicate of it, and the queue holds
// exactly one message with one dedup row.
func requireOneOriginal(t *testing.T, e *env, q store.Queue, dedupID string, results []store.SendResult) {
	t.Helper()
	originals := 0
	for _, r := range results {
		require.Equal(t, results[0].ID, r.ID, "every answer names the same message")
		if !r.Duplicate {
			originals++
		}
	}
	require.Equal(t, 1, originals, "exactly one answer is not a duplicate")
	require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND dedup_id = $2`, q.ID, dedupID))
	require.EqualValues(t, results[0].ID, e.count(`SELECT id FROM ferry.messages WHERE queue_id = $1 AND dedup_id = $2`, q.ID, dedupID))
	require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.dedup WHERE queue_id = $1 AND dedup_id = $2`, q.ID, dedupID))
	e.requireCountersExact(q)
}

// Invariant 4: a dedup key never creates a second message, also when
// identical sends race.
func TestDedupConcurrent(t *testing.T) {
	t.Parallel()
	setup := queueSetup("dedup", store.QueuePatch{})
	m := store.SendMessage{Body: json.RawMessage(`{"n":1}`), DedupID: "evt-1"}

	t.Run("OneSender", func(t *testing.T) {
		// Group commit may gather several of the sends into one transaction:
		// the repeats inside it must be settled too.
		t.Parallel()
		e, q := setup(t)
		for round := range 3 {
			m := m
			m.DedupID = fmt.Sprintf("evt-%d", round)
			requireOneOriginal(t, e, q, m.DedupID, sendAtOnce(t, []*store.Sender{e.sender}, q.Name, 20, m))
		}
	})

	t.Run("ManySenders", func(t *testing.T) {
		// One Sender per send, each with one worker: 20 transactions race
		// on the dedup primary key.
		t.Parallel()
		e, q := setup(t)
		senders := make([]*store.Sender, 20)
		for i := range senders {
			senders[i] = e.newSender(store.SenderConfig{Workers: 1})
		}
		for round := range 3 {
			m := m
			m.DedupID = fmt.Sprintf("evt-%d", round)
			requireOneOriginal(t, e, q, m.DedupID, sendAtOnce(t, senders, q.Name, 20, m))
		}
	})

	t.Run("RepeatsInOneBatch", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		d := func(id string, n int) store.SendMessage {
			return store.SendMessage{Body: body(t, payload{Seq: n}), DedupID: id}
		}
		res := e.send(q, d("a", 0), d("b", 1), d("a", 2), d("a", 3), msg(4), d("b", 5))
		require.False(t, res[0].Duplicate)
		require.False(t, res[1].Duplicate)
		require.True(t, res[2].Duplicate)
		require.True(t, res[3].Duplicate)
		require.False(t, res[4].Duplicate)
		require.True(t, res[5].Duplicate)
		require.Equal(t, res[0].ID, res[2].ID)
		require.Equal(t, res[0].ID, res[3].ID)
		require.Equal(t, res[1].ID, res[5].ID)
		require.NotEqual(t, res[0].ID, res[1].ID)
		require.EqualValues(t, 3, e.live(q))

		// The first occurrence's body is the one kept.
		got := e.claim(q, 10, time.Minute)
		require.Len(t, got, 3)
		bodies := map[int64]int{}
		for _, m := range got {
			bodies[m.ID] = decode(t, m.Body).Seq
		}
		require.Equal(t, map[int64]int{res[0].ID: 0, res[1].ID: 1, res[4].ID: 4}, bodies)

		// A later batch repeating both ids (and one twice) only gets
		// duplicates of the originals, also after they were acked: the
		// dedup id outlives its message.
		require.Equal(t, []bool{true, true, true}, e.ack(q, receipts(got)...))
		res2 := e.send(q, d("b", 6), d("a", 7), d("b", 8), d("c", 9))
		require.Equal(t, store.SendResult{ID: res[1].ID, Duplicate: true}, res2[0])
		require.Equal(t, store.SendResult{ID: res[0].ID, Duplicate: true}, res2[1])
		require.Equal(t, store.SendResult{ID: res[1].ID, Duplicate: true}, res2[2])
		require.False(t, res2[3].Duplicate)
		require.EqualValues(t, 1, e.live(q))
		e.requireCountersExact(q)
	})

	t.Run("PerQueue", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		other := e.queue("other", store.QueuePatch{})
		a := e.send(q, m)
		b := e.send(other, m)
		require.False(t, a[0].Duplicate)
		require.False(t, b[0].Duplicate, "a dedup id is scoped to its queue")
		require.NotEqual(t, a[0].ID, b[0].ID)
	})

	t.Run("WindowZero", func(t *testing.T) {
		t.Parallel()
		e, q := newQueueEnv(t, "nodedup", store.QueuePatch{DedupWindowSeconds: ptr(0)})
		first := e.send(q, m)
		second := e.send(q, m)
		require.False(t, first[0].Duplicate)
		require.False(t, second[0].Duplicate, "a window of 0 remembers nothing")
		require.NotEqual(t, first[0].ID, second[0].ID)
		require.EqualValues(t, 2, e.live(q))
	})

	t.Run("WindowExpiry", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		first := e.send(q, m)
		require.True(t, e.send(q, m)[0].Duplicate)

		// The window ends: the same id makes a new message, and the dedup
		// row now answers for the new one.
		_, err := e.pool.Exec(e.ctx, `UPDATE ferry.dedup SET expires_at = now() - interval '1 second' WHERE queue_id = $1`, q.ID)
		require.NoError(t, err)
		second := e.send(q, m)
		require.False(t, second[0].Duplicate)
		require.NotEqual(t, first[0].ID, second[0].ID)
		third := e.send(q, m)
		require.Equal(t, store.SendResult{ID: second[0].ID, Duplicate: true}, third[0])
		require.EqualValues(t, 2, e.live(q))

		// DedupExpire removes ended windows only.
		other := store.SendMessage{Body: json.RawMessage(`{}`), DedupID: "evt-2"}
		e.send(q, other)
		_, err = e.pool.Exec(e.ctx, `UPDATE ferry.dedup SET expires_at = now() - interval '1 second' WHERE queue_id = $1 AND dedup_id = 'evt-1'`, q.ID)
		require.NoError(t, err)
		n, err := store.DedupExpire(e.ctx, e.pool, 100)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.dedup WHERE queue_id = $1`, q.ID))
		require.True(t, e.send(q, other)[0].Duplicate)
		require.False(t, e.send(q, m)[0].Duplicate)
	})

	t.Run("ConcurrentTakeover", func(t *testing.T) {
		// Identical sends racing to take over an expired dedup row: still
		// exactly one new message.
		t.Parallel()
		e, q := setup(t)
		old := e.send(q, m)
		_, err := e.pool.Exec(e.ctx, `UPDATE ferry.dedup SET expires_at = now() - interval '1 second' WHERE queue_id = $1`, q.ID)
		require.NoError(t, err)
		senders := make([]*store.Sender, 10)
		for i := range senders {
			senders[i] = e.newSender(store.SenderConfig{Workers: 1})
		}
		results := sendAtOnce(t, senders, q.Name, 20, m)
		originals := 0
		for _, r := range results {
			require.Equal(t, results[0].ID, r.ID)
			require.NotEqual(t, old[0].ID, r.ID)
			if !r.Duplicate {
				originals++
			}
		}
		require.Equal(t, 1, originals)
		require.EqualValues(t, 2, e.live(q))
		e.requireCountersExact(q)
	})
}

// Invariant 9: a batch is all-or-nothing, and max_depth refuses whole
// batches before writing.
func TestSendBatchAtomicity(t *testing.T) {
	t.Parallel()

	t.Run("MaxDepth", func(t *testing.T) {
		t.Parallel()
		e, q := newQueueEnv(t, "bounded", store.QueuePatch{MaxDepth: ptr[int64](10), RetentionSeconds: ptr(3600)})
		batch := func(n int) []store.SendMessage {
			out := make([]store.SendMessage, n)
			for i := range out {
				out[i] = msg(i)
			}
			return out
		}
		e.send(q, batch(8)...)

		_, _, err := e.sender.Send(e.ctx, q.Name, batch(3))
		var full *store.QueueFullError
		require.ErrorAs(t, err, &full)
		require.EqualValues(t, 8, full.Depth)
		require.EqualValues(t, 10, full.MaxDepth)
		require.EqualValues(t, 8, e.live(q), "a refused batch writes nothing")

		e.send(q, batch(2)...)
		require.EqualValues(t, 10, e.live(q))

		// Depth counts in-flight and delayed messages as well.
		got := e.claim(q, 3, time.Minute)
		require.Len(t, got, 3)
		_, dead := e.nack(store.NackParams{Queue: q, Receipts: receipts(got[:1]), Delay: ptr(time.Hour)})
		require.Zero(t, dead)
		_, _, err = e.sender.Send(e.ctx, q.Name, batch(1))
		require.ErrorAs(t, err, &full)
		require.EqualValues(t, 10, e.live(q))

		// An ack frees room for exactly one more.
		require.Equal(t, []bool{true}, e.ack(q, got[1].Receipt))
		e.send(q, batch(1)...)
		_, _, err = e.sender.Send(e.ctx, q.Name, batch(1))
		require.ErrorAs(t, err, &full)
		require.EqualValues(t, 10, e.live(q))
		e.requireCountersExact(q)
	})

	t.Run("MaxDepthConcurrent", func(t *testing.T) {
		// Many transactions race for the last room in the queue: none may
		// pass the limit together with another. Batches of 3 against a
		// limit of 20 with no consumer: the depth must end at exactly 18.
		t.Parallel()
		e, q := newQueueEnv(t, "bounded", store.QueuePatch{MaxDepth: ptr[int64](20)})
		senders := make([]*store.Sender, 8)
		for i := range senders {
			senders[i] = e.newSender(store.SenderConfig{Workers: 2})
		}
		var (
			mu       sync.Mutex
			accepted int
		)
		atOnce(48, func(i int) {
			_, _, err := senders[i%len(senders)].Send(context.Background(), q.Name, []store.SendMessage{msg(i), msg(i), msg(i)})
			var full *store.QueueFullError
			switch {
			case err == nil:
				mu.Lock()
				accepted++
				mu.Unlock()
			case errors.As(err, &full):
			default:
				t.Errorf("send %d: %v", i, err)
			}
		})
		require.Equal(t, 6, accepted)
		require.EqualValues(t, 18, e.live(q))
		e.requireCountersExact(q)
	})

	t.Run("InvalidItem", func(t *testing.T) {
		t.Parallel()
		e, q := newQueueEnv(t, "short", store.QueuePatch{RetentionSeconds: ptr(60)})
		e.send(q, msg(0))

		for name, bad := range map[string]store.SendMessage{
			"delay":      {Body: json.RawMessage(`{}`), Delay: ptr(time.Minute)},
			"deliver_at": {Body: json.RawMessage(`{}`), DeliverAt: ptr(time.Now().Add(2 * time.Minute))},
		} {
			batch := []store.SendMessage{
				{Body: json.RawMessage(`{"n":1}`), DedupID: "d-" + name, Group: "g"},
				msg(2),
				bad,
			}
			before := e.live(q)
			_, _, err := e.sender.Send(e.ctx, q.Name, batch)
			var verr *store.ValidationError
			require.ErrorAs(t, err, &verr, name)
			require.Contains(t, verr.Field, "messages[2]", name)
			require.Equal(t, before, e.live(q), "%s: an invalid item writes nothing", name)
			require.Zero(t, e.count(`SELECT count(*) FROM ferry.dedup WHERE queue_id = $1 AND dedup_id = $2`, q.ID, "d-"+name),
				"%s: not even the dedup ids", name)

			// Nothing of the refused batch lingers: its dedup id is free.
			res := e.send(q, batch[0])
			require.False(t, res[0].Duplicate)
		}
		e.requireCountersExact(q)
	})

	t.Run("RefusalsDoNotSpread", func(t *testing.T) {
		// Many concurrent requests, some of which are refused for their own
		// reasons (full queue, invalid delay, unknown queue, a body the
		// database rejects): group commit may put them in one transaction
		// with good ones, which must all be written, while the refused
		// ones write nothing.
		t.Parallel()
		e, q := newQueueEnv(t, "mixed", store.QueuePatch{RetentionSeconds: ptr(60)})
		full := e.queue("full", store.QueuePatch{MaxDepth: ptr[int64](1)})
		e.send(full, msg(0))

		const rounds = 20
		type outcome struct {
			kind string
			res  []store.SendResult
			err  error
		}
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			outs []outcome
		)
		start := make(chan struct{})
		do := func(kind, queue string, msgs []store.SendMessage) {
			defer wg.Done()
			<-start
			res, _, err := e.sender.Send(context.Background(), queue, msgs)
			mu.Lock()
			outs = append(outs, outcome{kind, res, err})
			mu.Unlock()
		}
		for i := range rounds {
			wg.Add(6)
			go do("good", q.Name, []store.SendMessage{msg(i), grouped("g", i)})
			go do("good", q.Name, []store.SendMessage{{Body: body(t, payload{Seq: i}), DedupID: fmt.Sprintf("ok-%d", i)}})
			go do("invalid", q.Name, []store.SendMessage{{Body: json.RawMessage(`{}`), DedupID: fmt.Sprintf("bad-%d", i)}, {Body: json.RawMessage(`{}`), Delay: ptr(time.Hour)}})
			go do("full", full.Name, []store.SendMessage{msg(i)})
			go do("missing", "no-such-queue", []store.SendMessage{msg(i)})
			go do("badjson", q.Name, []store.SendMessage{{Body: json.RawMessage(`{}`), DedupID: fmt.Sprintf("json-%d", i)}, {Body: json.RawMessage(`{not json`)}})
		}
		close(start)
		wg.Wait()

		for _, o := range outs {
			switch o.kind {
			case "good":
				require.NoError(t, o.err)
				for _, r := range o.res {
					require.False(t, r.Duplicate)
					require.NotZero(t, r.ID)
				}
			case "invalid":
				var verr *store.ValidationError
				require.ErrorAs(t, o.err, &verr)
			case "full":
				var ferr *store.QueueFullError
				require.ErrorAs(t, o.err, &ferr)
			case "missing":
				require.ErrorIs(t, o.err, store.ErrNotFound)
			case "badjson":
				require.Error(t, o.err)
			}
		}
		require.EqualValues(t, 3*rounds, e.live(q), "every good message and nothing else")
		require.Zero(t, e.count(`SELECT count(*) FROM ferry.dedup WHERE dedup_id LIKE 'bad-%' OR dedup_id LIKE 'json-%'`))
		require.EqualValues(t, rounds, e.count(`SELECT count(*) FROM ferry.dedup WHERE dedup_id LIKE 'ok-%'`))
		require.EqualValues(t, 1, e.live(full))
		e.requireCountersExact(q)
		e.requireCountersExact(full)
	})
}

// Invariant 1: a send answers only after its transaction committed, and
// group commit loses nothing.
func TestSendGroupCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var (
		mu        sync.Mutex
		announced = map[int64]int{}
	)
	sender := e.newSender(store.SenderConfig{Committed: func(queueIDs []int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range queueIDs {
			announced[id]++
		}
	}})
	q := e.queue("gc", store.QueuePatch{})
	other := e.queue("gc-other", store.QueuePatch{})
	// A separate pool: a read through it can only see committed rows.
	reader := e.newPool(4)

	const n = 64
	got, errs := make([]int64, n), make([]error, n)
	atOnce(n, func(i int) {
		target := q
		if i%4 == 3 {
			target = other
		}
		res, qid, err := sender.Send(context.Background(), target.Name, []store.SendMessage{msg(i)})
		if err != nil {
			errs[i] = err
			return
		}
		if qid != target.ID || len(res) != 1 || res[0].Duplicate {
			errs[i] = fmt.Errorf("send %d: queue %d, results %+v", i, qid, res)
			return
		}
		got[i] = res[0].ID
		// Immediately after the answer, another connection sees the
		// message with the body that was sent.
		var seq int
		err = reader.QueryRow(context.Background(),
			`SELECT (body->>'seq')::int FROM ferry.messages WHERE queue_id = $1 AND id = $2`, target.ID, res[0].ID).Scan(&seq)
		if err != nil {
			errs[i] = fmt.Errorf("send %d: message %d not readable after Send returned: %w", i, res[0].ID, err)
			return
		}
		if seq != i {
			errs[i] = fmt.Errorf("send %d: message %d holds seq %d", i, res[0].ID, seq)
		}
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	seen := map[int64]bool{}
	for i, id := range got {
		require.False(t, seen[id], "id %d answered twice (send %d)", id, i)
		seen[id] = true
	}
	require.EqualValues(t, 3*n/4, e.live(q))
	require.EqualValues(t, n/4, e.live(other))
	mu.Lock()
	require.Positive(t, announced[q.ID], "Committed announces the queues written to")
	require.Positive(t, announced[other.ID])
	mu.Unlock()
	e.requireCountersExact(q)
	e.requireCountersExact(other)
}

// Edge inputs are stored and returned byte for byte.
func TestSendEdgeInputs(t *testing.T) {
	t.Parallel()
	setup := queueSetup("edge", store.QueuePatch{})

	t.Run("Bodies", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		big := `"` + strings.Repeat("ä€𝄞x", 256*1024/10) + `"`  // multi-byte runes, ~256 KiB
		bigASCII := `"` + strings.Repeat("y", 256*1024-2) + `"` // exactly 256 KiB
		require.Len(t, bigASCII, 256*1024)
		bodies := []string{
			`null`,
			`0`,
			`""`,
			`[]`,
			`{}`,
			`false`,
			`"\u0000 nul escape, \ud83d\ude00 surrogate pair"`,
			`{"名前": "フェリー", "emoji": "🚢", "rtl": "שלום", "combining": "é"}`,
			`{ "spaced" :  [1,  2 , 3] ,"dup":1, "dup":2 }`, // json keeps text as given
			`1e400`,
			big,
			bigASCII,
		}
		attrs := json.RawMessage(`{"type":"ünïcödé","k":"🚢"}`)
		var msgs []store.SendMessage
		for _, b := range bodies {
			msgs = append(msgs, store.SendMessage{Body: json.RawMessage(b), Attributes: attrs, Group: "grüppe-🚢", DedupID: "dédup-" + fmt.Sprint(len(msgs))})
		}
		res := e.send(q, msgs...)
		for i := range bodies {
			got := e.claim(q, 10, time.Minute)
			require.Len(t, got, 1, "one at a time: they share a group")
			require.Equal(t, res[i].ID, got[0].ID)
			require.Equal(t, bodies[i], string(got[0].Body), "body %d byte-identical", i)
			require.Equal(t, string(attrs), string(got[0].Attributes))
			require.Equal(t, "grüppe-🚢", *got[0].Group)
			require.Equal(t, msgs[i].DedupID, *got[0].DedupID)
			require.Equal(t, []bool{true}, e.ack(q, got[0].Receipt))
		}
	})

	t.Run("DeadLetterKeepsBytes", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		b := `{"s": "\u0000🚢", "n": 1.50}`
		e.send(q, store.SendMessage{Body: json.RawMessage(b), Attributes: json.RawMessage(`{"a" : "b"}`)})
		got := e.claimOne(q, time.Minute)
		_, dead := e.nack(store.NackParams{Queue: q, Receipts: receipts(got), DeadLetter: true})
		require.Equal(t, 1, dead)
		dls, _, err := store.DeadLetterList(e.ctx, e.pool, q.ID, 0, 10)
		require.NoError(t, err)
		require.Len(t, dls, 1)
		require.Equal(t, b, string(dls[0].Body))
		require.Equal(t, `{"a" : "b"}`, string(dls[0].Attributes))
		n, err := store.DeadLetterRedrive(e.ctx, e.pool, store.RedriveParams{QueueID: q.ID, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		got = e.claim(q, 1, time.Minute)
		require.Len(t, got, 1)
		require.Equal(t, b, string(got[0].Body))
	})

	t.Run("HugeBatch", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		const n = 1000
		msgs := make([]store.SendMessage, n)
		for i := range msgs {
			msgs[i] = store.SendMessage{Body: body(t, payload{Seq: i}), DedupID: fmt.Sprintf("d%d", i%700)}
			if i%3 == 0 {
				msgs[i].Group = fmt.Sprintf("g%d", i%7)
			}
		}
		res := e.send(q, msgs...)
		for i, r := range res {
			if i >= 700 {
				require.True(t, r.Duplicate, "message %d repeats dedup id d%d", i, i%700)
				require.Equal(t, res[i%700].ID, r.ID)
			} else {
				require.False(t, r.Duplicate)
				if i > 0 {
					require.Greater(t, r.ID, res[i-1].ID, "ids follow batch order")
				}
			}
		}
		require.EqualValues(t, 700, e.live(q))
		require.EqualValues(t, 700, e.stats(q).Available)
		// Only one message per group is a head.
		require.EqualValues(t, 7, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND grp IS NOT NULL AND NOT waiting`, q.ID))
		require.EqualValues(t, 7, e.count(`SELECT count(DISTINCT grp) FROM ferry.messages WHERE queue_id = $1 AND grp IS NOT NULL AND NOT waiting`, q.ID))
	})

	t.Run("EmptyBatch", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		res, _, err := e.sender.Send(e.ctx, q.Name, nil)
		require.NoError(t, err)
		require.Empty(t, res)
		require.Zero(t, e.live(q))
	})

	t.Run("UnknownQueue", func(t *testing.T) {
		t.Parallel()
		e, _ := setup(t)
		_, _, err := e.sender.Send(e.ctx, "nope", []store.SendMessage{msg(1)})
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, e.count(`SELECT count(*) FROM ferry.messages`))
	})

	t.Run("CancelledBeforeTaken", func(t *testing.T) {
		t.Parallel()
		e, q := setup(t)
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		_, _, err := e.sender.Send(ctx, q.Name, []store.SendMessage{msg(1)})
		require.True(t, errors.Is(err, context.Canceled), "got %v", err)
		require.Zero(t, e.live(q))
	})
}

// The Sender reads queue configurations through a cache. A stale entry may
// delay a configuration change (documented), but must not make a send to
// an existing queue fail.
func TestSendQueueCache(t *testing.T) {
	t.Parallel()

	t.Run("RecreatedQueue", func(t *testing.T) {
		// Another instance deletes the queue and creates it again under
		// the same name while this instance's cache still holds the old
		// one: the send must reach the new queue, not answer "not found".
		t.Parallel()
		e := newEnv(t)
		sender := e.newSender(store.SenderConfig{Queues: store.NewQueueCache(time.Hour)})
		q := e.queue("again", store.QueuePatch{})
		_, _, err := sender.Send(e.ctx, q.Name, []store.SendMessage{msg(0)})
		require.NoError(t, err)

		tx, err := e.pool.Begin(e.ctx)
		require.NoError(t, err)
		_, err = store.QueueDelete(e.ctx, tx, q.Name)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(e.ctx))
		for {
			n, err := store.QueueDeleteContent(e.ctx, e.pool, q.ID, 100)
			require.NoError(t, err)
			if n == 0 {
				break
			}
		}
		fresh := e.queue(q.Name, store.QueuePatch{})

		res, qid, err := sender.Send(e.ctx, q.Name, []store.SendMessage{msg(1)})
		require.NoError(t, err, "send to an existing queue")
		require.Equal(t, fresh.ID, qid)
		require.Len(t, res, 1)
		require.EqualValues(t, 1, e.live(fresh))
	})

	t.Run("Forget", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		cache := store.NewQueueCache(time.Hour)
		sender := e.newSender(store.SenderConfig{Queues: cache})
		q := e.queue("limited", store.QueuePatch{})
		_, _, err := sender.Send(e.ctx, q.Name, []store.SendMessage{msg(0), msg(1)})
		require.NoError(t, err)
		_, _, err = store.QueueUpsert(e.ctx, e.pool, q.Name, store.QueuePatch{MaxDepth: ptr[int64](2)})
		require.NoError(t, err)
		cache.Forget(q.Name)
		_, _, err = sender.Send(e.ctx, q.Name, []store.SendMessage{msg(2)})
		var full *store.QueueFullError
		require.ErrorAs(t, err, &full)
	})
}

// A duplicate is answered with the first message's id even when the dedup
// window ends right after the duplicate was detected (and the sweep removes
// the dedup row, or another send takes it over) before the answer is read.
// The interleaving is forced: the duplicate's send is held inside its
// transaction, another session queues for an exclusive lock on ferry.dedup
// behind it, and so runs between the send's commit and anything the send
// does afterwards.
func TestDedupAnswerAtWindowEnd(t *testing.T) {
	t.Parallel()
	for _, takeover := range []bool{false, true} {
		t.Run(map[bool]string{false: "Swept", true: "TakenOver"}[takeover], func(t *testing.T) {
			t.Parallel()
			e, q := newQueueEnv(t, "window", store.QueuePatch{})
			m := store.SendMessage{Body: json.RawMessage(`{}`), DedupID: "x"}
			first := e.send(q, m)

			release := e.holdSends()
			// The duplicate was detected (the INSERT ran) and the send waits
			// in the hold trigger.
			sendDone := e.startHeldSend(q, m)

			locker, err := e.newNamedPool(1, "locker").Begin(e.ctx)
			require.NoError(t, err)
			defer func() { _ = locker.Rollback(e.ctx) }()
			locked := make(chan error, 1)
			go func() {
				_, err := locker.Exec(e.ctx, `LOCK TABLE ferry.dedup IN ACCESS EXCLUSIVE MODE`)
				locked <- err
			}()
			e.activityWaitingEventually("locker")
			release()
			require.NoError(t, <-locked)

			// The window ends; the sweep removes the row (and a new send may
			// take the id over).
			_, err = locker.Exec(e.ctx, `UPDATE ferry.dedup SET expires_at = now() - interval '1 second' WHERE queue_id = $1`, q.ID)
			require.NoError(t, err)
			n, err := store.DedupExpire(e.ctx, locker, 100)
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			if takeover {
				_, err = locker.Exec(e.ctx, `INSERT INTO ferry.dedup (queue_id, dedup_id, message_id, expires_at) VALUES ($1, 'x', 999999, now() + interval '5 minutes')`, q.ID)
				require.NoError(t, err)
			}
			require.NoError(t, locker.Commit(e.ctx))

			s := <-sendDone
			require.NoError(t, s.err)
			require.Len(t, s.res, 1)
			require.True(t, s.res[0].Duplicate)
			require.Equal(t, first[0].ID, s.res[0].ID, "a duplicate answers the first message's id")
		})
	}
}

// A send stuck behind a lock held elsewhere gives up after the lock
// timeout with ErrBusy, instead of holding up sends to other queues.
func TestSendLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	a, _, err := store.QueueUpsert(ctx, pool, "held", store.QueuePatch{})
	require.NoError(t, err)
	_, _, err = store.QueueUpsert(ctx, pool, "free", store.QueuePatch{})
	require.NoError(t, err)
	s := store.NewSender(pool, store.SenderConfig{Workers: 2})
	defer s.Close()

	// Another session holds queue "held" exclusively (as a purge does).
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(ferry.queue_lock_key($1))`, a.ID)
	require.NoError(t, err)

	blocked := make(chan error, 1)
	go func() {
		_, _, err := s.Send(ctx, "held", []store.SendMessage{{Body: json.RawMessage(`1`)}})
		blocked <- err
	}()
	// Sends to another queue still complete while that one waits.
	start := time.Now()
	_, _, err = s.Send(ctx, "free", []store.SendMessage{{Body: json.RawMessage(`2`)}})
	require.NoError(t, err)
	err = <-blocked
	require.ErrorIs(t, err, store.ErrBusy)
	require.Less(t, time.Since(start), 20*time.Second)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, a.ID).Scan(&n))
	require.Zero(t, n, "the busy send wrote nothing")
}

func deduped(id string, seq int) store.SendMessage {
	m := msg(seq)
	m.DedupID = id
	return m
}

// TestMaxDepthDuplicatesTakeNoRoom: a dedup_id already accepted is
// answered as a duplicate with the first message's id also when the queue
// is at max_depth (API.md: duplicates take no room); only the batch's new
// messages count against the limit.
func TestMaxDepthDuplicatesTakeNoRoom(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "bounded", store.QueuePatch{MaxDepth: ptr[int64](2)})
	first := e.send(q, deduped("a", 1), deduped("b", 2))
	require.EqualValues(t, 2, e.live(q))

	// At max_depth: the resend of a is a duplicate, not a refusal.
	again := e.send(q, deduped("a", 1))
	require.Equal(t, []store.SendResult{{ID: first[0].ID, Duplicate: true}}, again)
	again = e.send(q, deduped("b", 2), deduped("a", 1), deduped("b", 3))
	require.Equal(t, []store.SendResult{
		{ID: first[1].ID, Duplicate: true}, {ID: first[0].ID, Duplicate: true}, {ID: first[1].ID, Duplicate: true},
	}, again)

	// A duplicate with one new message: the new one does not fit, and the
	// whole batch is refused.
	_, _, err := e.sender.Send(e.ctx, q.Name, []store.SendMessage{deduped("a", 1), deduped("c", 3)})
	var full *store.QueueFullError
	require.ErrorAs(t, err, &full)
	require.EqualValues(t, 2, full.Depth)
	require.EqualValues(t, 2, e.live(q))

	// With room for one, the same batch is a duplicate and one new message.
	got := e.claim(q, 1, time.Minute)
	require.Equal(t, []bool{true}, e.ack(q, receipts(got)...))
	res := e.send(q, deduped("a", 1), deduped("c", 3))
	require.Equal(t, store.SendResult{ID: first[0].ID, Duplicate: true}, res[0])
	require.False(t, res[1].Duplicate)
	require.EqualValues(t, 2, e.live(q))
	e.requireCountersExact(q)
}

// TestMaxDepthConcurrentDuplicates: concurrent sends of one dedup id to a
// queue with room for one message all succeed, whether group commit puts
// them in one transaction or not: one message is written, every answer
// names it.
func TestMaxDepthConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "bounded", store.QueuePatch{MaxDepth: ptr[int64](3)})
	e.send(q, msg(1), msg(2))
	for round := range 5 {
		id := fmt.Sprintf("same-%d", round)
		const n = 16
		var (
			results [n][]store.SendResult
			errs    [n]error
		)
		atOnce(n, func(i int) {
			results[i], _, errs[i] = e.sender.Send(context.Background(), q.Name, []store.SendMessage{deduped(id, i)})
		})
		created := 0
		for i := range n {
			require.NoError(t, errs[i], "round %d send %d", round, i)
			require.Equal(t, results[0][0].ID, results[i][0].ID, "round %d: every answer names the one message", round)
			if !results[i][0].Duplicate {
				created++
			}
		}
		require.Equal(t, 1, created, "round %d", round)
		require.EqualValues(t, 3, e.live(q))
		// Make room for the next round.
		got := e.claim(q, 1, time.Minute)
		require.Equal(t, []bool{true}, e.ack(q, receipts(got)...))
	}
	e.requireCountersExact(q)
}

// TestMaxDepthBatchNeverFits: a batch with more new messages than
// max_depth can never be accepted, so it is a client's mistake (a
// ValidationError, 400), not a full queue (429, retry later); it writes
// nothing. Repeats within the batch and live duplicates are not new.
func TestMaxDepthBatchNeverFits(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "bounded", store.QueuePatch{MaxDepth: ptr[int64](3)})

	_, _, err := e.sender.Send(e.ctx, q.Name, []store.SendMessage{msg(1), msg(2), msg(3), msg(4)})
	var verr *store.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, "messages", verr.Field)
	require.Contains(t, verr.Message, "max_depth")
	require.Zero(t, e.live(q))

	// Four messages, three new: it fits the empty queue.
	res := e.send(q, deduped("x", 1), deduped("y", 2), deduped("x", 1), msg(3))
	require.True(t, res[2].Duplicate)
	require.EqualValues(t, 3, e.live(q))

	// Five messages, two live duplicates, three new: each could fit an
	// empty queue, so a full one is a 429, not a 400.
	_, _, err = e.sender.Send(e.ctx, q.Name,
		[]store.SendMessage{deduped("x", 1), deduped("y", 2), msg(4), msg(5), msg(6)})
	var full *store.QueueFullError
	require.ErrorAs(t, err, &full)
	require.EqualValues(t, 3, e.live(q))
	e.requireCountersExact(q)
}

// TestMaxDepthDuplicatesOverTheLimit: a queue can hold more than its
// max_depth (the limit was lowered after the messages came); a resend of
// an accepted dedup_id is still answered as the duplicate it is, and a new
// message is still refused.
func TestMaxDepthDuplicatesOverTheLimit(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "lowered", store.QueuePatch{})
	first := e.send(q, deduped("a", 1), deduped("b", 2), deduped("c", 3))
	q, created, err := store.QueueUpsert(e.ctx, e.pool, q.Name, store.QueuePatch{MaxDepth: ptr[int64](2)})
	require.NoError(t, err)
	require.False(t, created)

	e.sender = e.newSender(store.SenderConfig{}) // one that has not cached the queue without its limit

	again := e.send(q, deduped("c", 3), deduped("a", 1))
	require.Equal(t, []store.SendResult{{ID: first[2].ID, Duplicate: true}, {ID: first[0].ID, Duplicate: true}}, again)
	_, _, err = e.sender.Send(e.ctx, q.Name, []store.SendMessage{deduped("d", 4)})
	var full *store.QueueFullError
	require.ErrorAs(t, err, &full)
	require.EqualValues(t, 3, e.live(q))
}
