package store_test

import (
	"strconv"
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
