package handlers_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

func TestDeadLetterPaginationAndRedrive(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "r", nil)
	batch := make([]map[string]any, 5)
	for i := range batch {
		batch[i] = msg(i)
	}
	sent := ids(send(t, env, "r", batch...))
	got := receive(t, env, "r", map[string]any{"max_messages": 10})
	require.Len(t, got, 5)
	require.Equal(t, repeat("ok", 5), settle(t, env, "r", "nack",
		map[string]any{"receipts": receipts(got), "dead_letter": true, "error": "boom"}))
	require.Equal(t, client.QueueStats{DeadLetters: 5}, stats(t, env, "r"))

	// Pages of 2: 2, 2, 1, no overlap, send order, next null on the last.
	var all []string
	cursor := ""
	for page := 0; ; page++ {
		q := "?limit=2"
		if cursor != "" {
			q += "&after=" + cursor
		}
		p := deadLetters(t, env, "r", q)
		for _, m := range p.Messages {
			all = append(all, m.ID)
			require.Equal(t, "boom", *m.LastError)
			require.Equal(t, 1, m.ReceiveCount)
		}
		if page < 2 {
			require.Len(t, p.Messages, 2)
			require.NotNil(t, p.Next, "page %d", page)
			require.NotEmpty(t, *p.Next)
			cursor = *p.Next
			continue
		}
		require.Len(t, p.Messages, 1)
		require.Nil(t, p.Next, "next is null on the last page")
		break
	}
	require.Equal(t, sent, all, "pages cover every dead letter once, in send order")

	// A page that ends exactly at the last dead letter is the last page.
	p := deadLetters(t, env, "r", "?limit=5")
	require.Len(t, p.Messages, 5)
	require.Nil(t, p.Next)
	p = deadLetters(t, env, "r", "")
	require.Len(t, p.Messages, 5, "default limit 100")
	require.Nil(t, p.Next)

	// Redrive by ids; ids that are not dead letters are skipped.
	r := env.Do("POST", "/v1/queues/r/dead-letters/redrive", map[string]any{"ids": []string{sent[3], sent[1], "999999999"}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	requireKeys(t, r.Map(t), []string{"redriven"}, "redrive response")
	require.JSONEq(t, `{"redriven":2}`, string(r.Body))
	require.Equal(t, client.QueueStats{Available: 2, DeadLetters: 3}, counts(t, env, "r"))
	// Redriving them again (they are live now, not dead letters) does nothing.
	r = env.Do("POST", "/v1/queues/r/dead-letters/redrive", map[string]any{"ids": []string{sent[3], sent[1]}})
	require.JSONEq(t, `{"redriven":0}`, string(r.Body))
	require.EqualValues(t, 2, stats(t, env, "r").Available)
	back := receive(t, env, "r", map[string]any{"max_messages": 10})
	require.Equal(t, []string{sent[1], sent[3]}, msgIDs(back), "redriven in original send order, same ids")
	for i, m := range back {
		require.Equal(t, 1, m.ReceiveCount, "receive_count reset")
		require.JSONEq(t, strconv.Itoa([]int{1, 3}[i]), string(m.Body))
	}
	ack(t, env, "r", receipts(back)...)

	// Redrive by limit: the oldest first.
	r = env.Do("POST", "/v1/queues/r/dead-letters/redrive", map[string]any{"limit": 2})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.JSONEq(t, `{"redriven":2}`, string(r.Body))
	back = receive(t, env, "r", map[string]any{"max_messages": 10})
	require.Equal(t, []string{sent[0], sent[2]}, msgIDs(back))
	require.Equal(t, []string{sent[4]}, deadIDs(deadLetters(t, env, "r", "").Messages))

	// More than there are: what there is.
	r = env.Do("POST", "/v1/queues/r/dead-letters/redrive", map[string]any{"limit": 100})
	require.JSONEq(t, `{"redriven":1}`, string(r.Body))
	r = env.Do("POST", "/v1/queues/r/dead-letters/redrive", map[string]any{"limit": 100})
	require.JSONEq(t, `{"redriven":0}`, string(r.Body))
	require.EqualValues(t, 0, stats(t, env, "r").DeadLetters)
}

// TestDeadLettersInSendOrderAcrossSends: dead letters are listed (and
// redriven) in original send order, also when the messages were sent by
// separate requests.
func TestDeadLettersInSendOrderAcrossSends(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "dlo", nil)
	const n = 30
	sent := sendEach(t, env, "dlo", n, func(i int) map[string]any { return msg(i) })
	got := receive(t, env, "dlo", map[string]any{"max_messages": 100})
	require.Len(t, got, n)
	require.Equal(t, repeat("ok", n), settle(t, env, "dlo", "nack", map[string]any{"receipts": receipts(got), "dead_letter": true}))
	require.Equal(t, sent, deadIDs(deadLetters(t, env, "dlo", "").Messages), "dead letters in send order")

	r := env.Do("POST", "/v1/queues/dlo/dead-letters/redrive", map[string]any{"limit": 5})
	require.JSONEq(t, `{"redriven":5}`, string(r.Body))
	back := receive(t, env, "dlo", map[string]any{"max_messages": 100})
	require.Equal(t, sent[:5], msgIDs(back), "redrive by limit takes the oldest, in send order")
}
