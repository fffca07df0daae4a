package store_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// A relay that found events stays awake (a fresh row of store.RelayWakeKey
// in ferry.wake_waiters), and a SQL publish meanwhile sends no NOTIFY.
// The race its going to sleep must not lose: a publish that read the row
// and commits after the relay deleted it is appended all the same, once
// its transaction has ended (the relay's fallback poll is half a minute
// away: only that wait explains it). Asleep, a publish NOTIFYs again.
func TestRelayAwakeLosesNoEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp, _, err := store.TopicUpsert(e.ctx, e.pool, e.name("awake"), store.TopicPatch{})
	require.NoError(t, err)
	heard := e.listenNotifications()
	conn, err := pgx.Connect(e.ctx, e.dbURL)
	require.NoError(t, err)
	defer conn.Close(e.ctx)
	_, n := e.runRelayWith(nil, func(r *store.Relay) { r.StayAwakeFor(3 * time.Second) })
	require.Eventually(t, n.Listening, 10*time.Second, time.Millisecond)
	awake := `SELECT count(*) FROM ferry.wake_waiters WHERE key = $1 AND registered_at > clock_timestamp() - interval '1 second'`

	e.sqlPublish(e.pool, tp.Name, ev("first", "t"))
	require.Eventually(t, func() bool { return e.pendingRows(tp) == 0 }, 5*time.Second, time.Millisecond, "the NOTIFY woke the relay")
	require.Eventually(t, func() bool { return e.count(awake, store.RelayWakeKey) == 1 }, 5*time.Second, time.Millisecond,
		"the relay that found an event is awake")
	requireHeardRelayWakes(t, e, heard, 1)

	tx, err := conn.Begin(e.ctx)
	require.NoError(t, err)
	e.sqlPublish(tx, tp.Name, ev("raced", "t"))
	var fresh int64
	require.NoError(t, tx.QueryRow(e.ctx, awake, store.RelayWakeKey).Scan(&fresh))
	require.EqualValues(t, 1, fresh, "the publish read a fresh row")
	require.Eventually(t, func() bool {
		return e.count(`SELECT count(*) FROM ferry.wake_waiters WHERE key = $1`, store.RelayWakeKey) == 0
	},
		10*time.Second, time.Millisecond, "the relay goes to sleep")
	committed := time.Now()
	require.NoError(t, tx.Commit(e.ctx))
	require.Eventually(t, func() bool { return e.pendingRows(tp) == 0 }, 5*time.Second, time.Millisecond,
		"the publish in progress as the relay went to sleep is appended")
	require.Less(t, time.Since(committed), 5*time.Second, "the relay's fallback poll is 30 s away (RelayConfig's default)")
	requireHeardRelayWakes(t, e, heard, 0) // it read the row: no NOTIFY

	// Appending it woke the relay again (its row comes just after the
	// append's commit): once asleep, publishes NOTIFY.
	require.Eventually(t, func() bool { return e.count(awake, store.RelayWakeKey) == 1 }, 5*time.Second, time.Millisecond,
		"the relay that appended the raced event is awake")
	require.Eventually(t, func() bool {
		return e.count(`SELECT count(*) FROM ferry.wake_waiters WHERE key = $1`, store.RelayWakeKey) == 0
	},
		10*time.Second, time.Millisecond)
	e.sqlPublish(e.pool, tp.Name, ev("asleep", "t"))
	require.Eventually(t, func() bool { return e.pendingRows(tp) == 0 }, 5*time.Second, time.Millisecond)
	requireHeardRelayWakes(t, e, heard, 1)
	require.EqualValues(t, 3, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
}

// A relay that stops while awake deletes its row, waits for the
// transactions in progress (a publish among them read the row and sent no
// NOTIFY), and then NOTIFYs, so that another instance's relay, asleep,
// appends what they published at once, not at its fallback poll (30 s
// away). Its NOTIFY was never sent before this test (its payload, an
// int64, cannot be encoded as text): the other relay never woke.
func TestRelayStopWakesAnotherForPublishesInProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp, _, err := store.TopicUpsert(e.ctx, e.pool, e.name("stop"), store.TopicPatch{})
	require.NoError(t, err)
	heard := e.listenNotifications()
	conn, err := pgx.Connect(e.ctx, e.dbURL)
	require.NoError(t, err)
	defer conn.Close(e.ctx)
	awake := `SELECT count(*) FROM ferry.wake_waiters WHERE key = $1 AND registered_at > clock_timestamp() - interval '1 second'`

	n := store.NewNotifier(e.pool, 5*time.Millisecond, slog.New(slog.DiscardHandler))
	r := store.NewRelay(e.pool, n, store.RelayConfig{})
	r.StayAwakeFor(time.Minute)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stopped := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); n.Run(ctx) }()
	go func() { defer wg.Done(); r.Run(ctx); close(stopped) }()
	t.Cleanup(func() { stop(); wg.Wait() })
	require.Eventually(t, n.Listening, 10*time.Second, time.Millisecond)
	e.sqlPublish(e.pool, tp.Name, ev("first", "t"))
	require.Eventually(t, func() bool { return e.count(awake, store.RelayWakeKey) == 1 }, 5*time.Second, time.Millisecond,
		"the relay that found an event is awake")
	requireHeardRelayWakes(t, e, heard, 1)
	_, other := e.runRelayWith(nil, func(*store.Relay) {}) // asleep: nothing pending
	require.Eventually(t, other.Listening, 10*time.Second, time.Millisecond)

	tx, err := conn.Begin(e.ctx)
	require.NoError(t, err)
	e.sqlPublish(tx, tp.Name, ev("raced", "t")) // reads the fresh row: no NOTIFY
	stop()
	require.Eventually(t, func() bool {
		return e.count(`SELECT count(*) FROM ferry.wake_waiters WHERE key = $1`, store.RelayWakeKey) == 0
	}, 10*time.Second, time.Millisecond, "the stopping relay deleted its row")
	select {
	case <-stopped:
		t.Fatal("the relay stopped while a publish that read its row was in progress")
	default:
	}
	committed := time.Now()
	require.NoError(t, tx.Commit(e.ctx))
	<-stopped
	require.Eventually(t, func() bool { return e.pendingRows(tp) == 0 }, 5*time.Second, time.Millisecond,
		"the other relay appended the raced event")
	require.Less(t, time.Since(committed), 5*time.Second, "its fallback poll is 30 s away")
	requireHeardRelayWakes(t, e, heard, 1) // the stopping relay's
	require.EqualValues(t, 2, e.count(`SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID))
}

// requireHeardRelayWakes sends a NOTIFY of its own and requires that the
// relays' wakes heard before it are n (the relay's appends NOTIFY their
// topic's readers too: not counted).
func requireHeardRelayWakes(t *testing.T, e *env, heard func() (string, bool), n int) {
	t.Helper()
	relayKey := strconv.FormatInt(store.RelayWakeKey, 10)
	_, err := e.pool.Exec(e.ctx, `SELECT pg_notify('ferry_messages', 'barrier')`)
	require.NoError(t, err)
	var got []string
	for {
		payload, ok := heard()
		require.True(t, ok, "the barrier never came")
		if payload == "barrier" {
			break
		}
		if payload == relayKey {
			got = append(got, payload)
		}
	}
	require.Len(t, got, n)
}
