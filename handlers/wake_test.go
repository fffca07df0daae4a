package handlers_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/ferrytest"
	"github.com/ferry-mq/ferry/internal/pgtest"
)

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
		since := dbNow(t, dbURL)
		done := make(chan asyncResult, 1)
		go func() { done <- doAsync(env, "POST", path, map[string]any{"wait_seconds": 10, "max_messages": 10}) }()
		parkedQuery(t, dbURL, "ferry-wake", since, `%receive_count >= $3 AS exhausted%`)
		write()
		res := <-done
		require.NoError(t, res.err)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		require.Less(t, res.took, 5*time.Second, "woken, not timed out: %s", res.body)
		var out struct {
			Messages []struct {
				ID string `json:"id"`
			} `json:"messages"`
		}
		require.NoError(t, json.Unmarshal(res.body, &out))
		ids := make([]string, len(out.Messages))
		for i, m := range out.Messages {
			ids[i] = m.ID
		}
		return ids
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
