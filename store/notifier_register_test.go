package store_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// parkedReceive starts a long poll on q through n that only a wake can
// end early (its fallback poll is a minute away) and returns once it is
// parked.
func parkedReceive(t *testing.T, e *env, n *store.Notifier, q store.Queue) <-chan received {
	t.Helper()
	parked := n.Parked()
	out := receiveAsync(e.ctx, e.pool, n, store.ReceiveParams{ClaimParams: store.ClaimParams{Queue: q, Max: 10, VisibilityTimeout: time.Minute},
		Wait: 30 * time.Second, FallbackPoll: time.Minute})
	require.Eventually(t, func() bool { return n.Parked() == parked+1 }, 10*time.Second, time.Millisecond, "the poll never parked")
	return out
}

// requireWoken requires that the poll returns the one message with the
// given id within 2 seconds of since (it polls on its own only after a
// minute: only a wake explains it).
func requireWoken(t *testing.T, out <-chan received, id string, since time.Time, msg string) {
	t.Helper()
	select {
	case r := <-out:
		require.NoError(t, r.err)
		require.Len(t, r.msgs, 1, msg)
		require.Equal(t, id, strconv.FormatInt(r.msgs[0].ID, 10), msg)
		require.Less(t, time.Since(since), 2*time.Second, msg)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the poll was not woken", msg)
	}
}

// TestNotifierRegistersWaiters: a long poll parked on a queue registers it
// (ferry.wake_waiters), so a ferry.send committed on another connection
// NOTIFYs and wakes it at once. And the race the registration must not
// lose: a send whose transaction wrote before the registration committed
// read no registration and sends no NOTIFY (the listener here hears none);
// the poll is woken all the same once that transaction has ended, because
// the Notifier waits out every transaction in progress at its
// registration's commit.
func TestNotifierRegistersWaiters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.runNotifier(e.newPool(4))
	require.Eventually(t, n.Listening, 10*time.Second, time.Millisecond)
	heard := e.listenNotifications()

	q := e.queue(e.name("woken"), store.QueuePatch{})
	out := parkedReceive(t, e, n, q)
	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM ferry.wake_waiters WHERE key = $1`, q.ID), "the parked poll registered its queue")
	var id string
	sentAt := time.Now()
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT id FROM ferry.send($1, '"now"')`, q.Name).Scan(&id))
	requireWoken(t, out, id, sentAt, "a send to a registered queue")
	payload, ok := heard()
	require.True(t, ok)
	require.Equal(t, strconv.FormatInt(q.ID, 10), payload)

	// The race: the send writes (and reads ferry.wake_waiters) before the
	// poll registers, and commits after the poll parked.
	raced := e.queue(e.name("raced"), store.QueuePatch{})
	conn, err := pgx.Connect(e.ctx, e.dbURL)
	require.NoError(t, err)
	defer conn.Close(e.ctx)
	tx, err := conn.Begin(e.ctx)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT id FROM ferry.send($1, '"raced"')`, raced.Name).Scan(&id))
	out = parkedReceive(t, e, n, raced)
	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM ferry.wake_waiters WHERE key = $1`, raced.ID))
	committedAt := time.Now()
	require.NoError(t, tx.Commit(e.ctx))
	requireWoken(t, out, id, committedAt, "a send in progress at the registration")
	_, err = e.pool.Exec(e.ctx, `SELECT pg_notify('ferry_messages', 'barrier')`)
	require.NoError(t, err)
	payload, ok = heard()
	require.True(t, ok)
	require.Equal(t, "barrier", payload, "the raced send read no registration, so it sent no NOTIFY")
}

// relayAwake is the statement that writes a relay's awake row, refreshed
// secondsAgo (store/event_relay_awake.go).
func relayAwake(secondsAgo string) string {
	return `INSERT INTO ferry.wake_waiters (key, listener, registered_at)
		VALUES (-9223372036854775806, 1, clock_timestamp() - interval '` + secondsAgo + ` seconds')`
}

// TestSQLSendNotifiesOnlyForWaiters: ferry.send to a queue no instance has
// registered sends no NOTIFY; one to a registered queue, to a push queue,
// or in a REPEATABLE READ transaction does, and so does ferry.publish (the
// relay's key) unless a relay is awake (a row refreshed within the second;
// in READ COMMITTED only); and every send does while an instance of an older release
// listens, or none of this release. Each is followed by a NOTIFY of the test's own, so the
// payloads heard show which sent one.
func TestSQLSendNotifiesOnlyForWaiters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	heard := e.listenNotifications()
	plain := e.queue(e.name("plain"), store.QueuePatch{})
	waited := e.queue(e.name("waited"), store.QueuePatch{})
	url := "https://example.com/hook"
	pushed := e.queue(e.name("pushed"), store.QueuePatch{Push: &store.PushPatch{URL: &url}})
	// A registration; each case below starts with a listener of this
	// release (key 0) and none of an older one.
	_, err := e.pool.Exec(e.ctx, `INSERT INTO ferry.wake_waiters (key, listener) VALUES ($1, pg_backend_pid())`, waited.ID)
	require.NoError(t, err)
	_, _, err = store.TopicUpsert(e.ctx, e.pool, e.name("t"), store.TopicPatch{})
	require.NoError(t, err)

	for _, c := range []struct {
		name, sql, isolation, want string
		before                     string // run first, in the transaction
	}{
		{"no waiter", `SELECT ferry.send($1, '1')`, "read committed", "", ""},
		{"a waiter", `SELECT ferry.send($1, '1')`, "read committed", strconv.FormatInt(waited.ID, 10), ""},
		{"push", `SELECT ferry.send($1, '1')`, "read committed", strconv.FormatInt(pushed.ID, 10), ""},
		{"repeatable read", `SELECT ferry.send($1, '1')`, "repeatable read", strconv.FormatInt(plain.ID, 10), ""},
		{"publish", `SELECT ferry.publish($1, 'x', '1')`, "read committed", "-9223372036854775806", ""},
		{"publish, a relay awake", `SELECT ferry.publish($1, 'x', '1')`, "read committed", "", relayAwake("0")},
		{"publish, a relay awake 2 s ago", `SELECT ferry.publish($1, 'x', '1')`, "read committed", "-9223372036854775806", relayAwake("2")},
		{"publish in repeatable read, a relay awake", `SELECT ferry.publish($1, 'x', '1')`, "repeatable read", "-9223372036854775806",
			relayAwake("0")},
		{"an older release listens", `SELECT ferry.send($1, '1')`, "read committed", strconv.FormatInt(plain.ID, 10),
			`INSERT INTO ferry.wake_waiters (key, listener) VALUES (-1, 1)`},
		{"no listener of this release", `SELECT ferry.send($1, '1')`, "read committed", strconv.FormatInt(plain.ID, 10),
			`DELETE FROM ferry.wake_waiters WHERE key = 0`},
	} {
		target := map[string]string{"a waiter": waited.Name, "push": pushed.Name}[c.name]
		if strings.HasPrefix(c.name, "publish") {
			target = e.name("t")
		}
		if target == "" {
			target = plain.Name
		}
		_, err := e.pool.Exec(e.ctx, `DELETE FROM ferry.wake_waiters WHERE key IN (0, -1, -9223372036854775806);
			INSERT INTO ferry.wake_waiters (key, listener) VALUES (0, pg_backend_pid())`)
		require.NoError(t, err)
		tx, err := e.pool.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: pgx.TxIsoLevel(c.isolation)})
		require.NoError(t, err)
		if c.before != "" {
			_, err = tx.Exec(e.ctx, c.before)
			require.NoError(t, err, c.name)
		}
		_, err = tx.Exec(e.ctx, c.sql, target)
		require.NoError(t, err, c.name)
		require.NoError(t, tx.Commit(e.ctx))
		_, err = e.pool.Exec(e.ctx, `SELECT pg_notify('ferry_messages', 'barrier')`)
		require.NoError(t, err)
		var got []string
		for {
			payload, ok := heard()
			require.True(t, ok, "%s: the barrier never came", c.name)
			if payload == "barrier" {
				break
			}
			got = append(got, payload)
		}
		if c.want == "" {
			require.Empty(t, got, c.name)
		} else {
			require.Equal(t, []string{c.want}, got, c.name)
		}
	}
}

// TestNotifierMarksOlderListeners: a session that LISTENs on Ferry's
// channel as an older release's instance does, without the row that says
// its polls register, is marked when a Notifier starts listening (key -1),
// and from then on a send to a queue nobody registered NOTIFYs; its mark
// is swept with it.
func TestNotifierMarksOlderListeners(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	older, err := pgx.Connect(e.ctx, e.dbURL)
	require.NoError(t, err)
	defer older.Close(e.ctx)
	_, err = older.Exec(e.ctx, `LISTEN ferry_messages`)
	require.NoError(t, err)
	n := e.runNotifier(e.newPool(4))
	require.Eventually(t, n.Listening, 10*time.Second, time.Millisecond)
	pid := older.PgConn().PID()
	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM ferry.wake_waiters WHERE key = -1 AND listener = $1`, pid))
	require.Equal(t, int64(1), e.count(`SELECT count(*) FROM ferry.wake_waiters WHERE key = 0`), "the Notifier's own listener")

	q := e.queue(e.name("q"), store.QueuePatch{})
	_, err = e.pool.Exec(e.ctx, `SELECT ferry.send($1, '1')`, q.Name)
	require.NoError(t, err)
	note, err := older.WaitForNotification(e.ctx)
	require.NoError(t, err)
	require.Equal(t, strconv.FormatInt(q.ID, 10), note.Payload)
}
