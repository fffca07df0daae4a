package handlers_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestDeadLetterQueueREST: a queue with a dead_letter_queue moves what it
// dead-letters (by a nack with dead_letter, by the receive past
// max_receives, and by the SQL API's ferry.nack in an application's
// transaction) into the target, where it is received with the reason
// attributes; the target lists its sources; a move takes the messages
// back in send order. Every answer is validated against the spec.
func TestDeadLetterQueueREST(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "dlq", nil)
	putQueue(t, env, "src", map[string]any{"max_receives": 1, "dead_letter_queue": "dlq"})
	got := getQueue(t, env, "dlq")
	require.Nil(t, got.DeadLetterQueue)
	require.Equal(t, []string{"src"}, got.DeadLetterSources)
	got = getQueue(t, env, "src")
	require.Equal(t, "dlq", *got.DeadLetterQueue)
	require.Equal(t, []string{}, got.DeadLetterSources)

	sent := ids(send(t, env, "src", msg("a", "group", "g", "attributes", map[string]string{"k": "v"}), msg("b", "group", "g"), msg("c")))
	// "a" and "c" received; "a" nacked with dead_letter, "c" nacked on its
	// last allowed receive.
	first := receive(t, env, "src", map[string]any{"max_messages": 10})
	require.Equal(t, []string{sent[0], sent[2]}, msgIDs(first))
	require.Equal(t, []string{"ok"}, settle(t, env, "src", "nack", map[string]any{"receipts": receipts(first[:1]), "dead_letter": true, "error": "bad"}))
	require.Equal(t, []string{"ok"}, settle(t, env, "src", "nack", map[string]any{"receipts": receipts(first[1:])}))
	// "b" through the SQL API, in an application's transaction.
	conn, err := pgx.Connect(context.Background(), env.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.NoError(t, pgx.BeginFunc(context.Background(), conn, func(tx pgx.Tx) error {
		var receipt string
		if err := tx.QueryRow(context.Background(), `SELECT receipt FROM ferry.receive('src')`).Scan(&receipt); err != nil {
			return err
		}
		_, err := tx.Exec(context.Background(), `SELECT * FROM ferry.nack('src', ARRAY[$1], '{"dead_letter": true}')`, receipt)
		return err
	}))

	require.Equal(t, client.QueueStats{}, counts(t, env, "src"), "no dead letter stays with the source")
	require.Equal(t, client.QueueStats{Available: 3}, counts(t, env, "dlq"))
	m := receive(t, env, "dlq", map[string]any{"max_messages": 10})
	require.Equal(t, []string{sent[0], sent[2]}, msgIDs(m), "a (its group's head) and c; b waits behind a")
	for _, x := range m {
		require.Equal(t, "src", x.Attributes["ferry:dead_letter_source"])
		require.Equal(t, 1, x.ReceiveCount)
	}
	require.Equal(t, "v", m[0].Attributes["k"])
	require.Equal(t, "nack", m[0].Attributes["ferry:dead_letter_reason"])
	require.Equal(t, "bad", m[0].Attributes["ferry:last_error"])
	require.Equal(t, "max_receives", m[1].Attributes["ferry:dead_letter_reason"])
	require.Equal(t, []string{"ok", "ok"}, ack(t, env, "dlq", receipts(m)...))
	m = receive(t, env, "dlq", map[string]any{"max_messages": 10})
	require.Equal(t, sent[1:2], msgIDs(m))
	require.Equal(t, "nack", m[0].Attributes["ferry:dead_letter_reason"])
	// Released, not acked: it goes back by the move below.
	require.Equal(t, []string{"ok"}, settle(t, env, "dlq", "nack", map[string]any{"receipts": receipts(m), "delay_seconds": 0}))

	moved := call[map[string]int](t, env, "POST", qpath("dlq", "/messages/move"), map[string]any{"to": "src"}, nil, http.StatusOK)
	require.Equal(t, map[string]int{"moved": 1}, moved)
	back := receive(t, env, "src", map[string]any{"max_messages": 10})
	require.Equal(t, sent[1:2], msgIDs(back))
	require.Empty(t, back[0].Attributes, "the dead-letter attributes are taken off")
}

// TestDeadLetterQueueRefusals: a missing target, the queue itself, a
// cycle and a bad move are 400 and change nothing; setting a target or
// moving into a queue needs send on it (403 naming it).
func TestDeadLetterQueueRefusals(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "a", nil)
	putQueue(t, env, "b", map[string]any{"dead_letter_queue": "a"})
	for _, c := range []struct {
		queue string
		body  map[string]any
	}{
		{"a", map[string]any{"dead_letter_queue": "nope"}},
		{"a", map[string]any{"dead_letter_queue": "a"}},
		{"a", map[string]any{"dead_letter_queue": "b"}},
		{"a", map[string]any{"dead_letter_queue": "bad name!"}},
		{"a", map[string]any{"dead_letter_queue": 5}},
	} {
		requireProblem(t, env.Do("PUT", qpath(c.queue), c.body), http.StatusBadRequest, "invalid_request")
	}
	require.Nil(t, getQueue(t, env, "a").DeadLetterQueue)
	for _, body := range []map[string]any{{}, {"to": "a"}, {"to": "b", "limit": 0}, {"to": "b", "extra": 1}} {
		requireProblem(t, env.Do("POST", qpath("a", "/messages/move"), body), http.StatusBadRequest, "invalid_request")
	}
	requireProblem(t, env.Do("POST", qpath("a", "/messages/move"), map[string]any{"to": "zzz"}), http.StatusNotFound, "not_found")

	k := createKey(t, env, "ops", nil, kperm("queue:a", "manage"), kperm("queue:b", "manage"))
	p := requireProblem(t, env.DoWith("PUT", qpath("a"), map[string]any{"dead_letter_queue": "b"}, bearer(k.Secret)), http.StatusForbidden, "forbidden")
	require.Contains(t, p["detail"], "queue:b send")
	p = requireProblem(t, env.DoWith("POST", qpath("a", "/messages/move"), map[string]any{"to": "b"}, bearer(k.Secret)), http.StatusForbidden, "forbidden")
	require.Contains(t, p["detail"], "queue:b send")
	k2 := createKey(t, env, "ops2", nil, kperm("queue:a", "manage"), kperm("queue:b", "send"))
	r := env.DoWith("POST", qpath("a", "/messages/move"), map[string]any{"to": "b"}, bearer(k2.Secret))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	// Deleting the target clears it on its source.
	requireNoContent(t, env.Do("DELETE", qpath("a"), nil), "delete a")
	require.Nil(t, getQueue(t, env, "b").DeadLetterQueue)
}
