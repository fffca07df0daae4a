package push

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// tally sorts a round: 2xx into acks, the rest into nacks keyed by their
// Retry-After (-1: the target's backoff) and error, one attempt each with
// its status, and tells Observe the outcome (ok, failed, gone) of each,
// with the time since the send for a success only.
func TestSettleTally(t *testing.T) {
	t.Parallel()
	type told struct {
		outcome string
		timed   bool
	}
	var observed []told
	p := &Pusher{cfg: Config{Observe: func(outcome string, since time.Duration) {
		observed = append(observed, told{outcome, since > 0})
	}}}
	r := &targetRun{p: p}
	group := "g"
	msg := func(id int64, group *string) store.Message {
		return store.Message{ID: id, Receipt: store.Receipt{MessageID: id, Token: id * 10}, ReceiveCount: 2,
			SentAt: time.Now().Add(-time.Second), Group: group}
	}
	wait := 5 * time.Second
	s := r.tally([]pushResult{
		{msg: msg(1, nil), publicID: "m1", status: 200},
		{msg: msg(2, &group), publicID: "m2", status: 503, err: "503 Service Unavailable", retryAfter: &wait},
		{msg: msg(3, nil), publicID: "m3", status: 503, err: "503 Service Unavailable"},
		{msg: msg(4, nil), publicID: "m4", status: 503, err: "503 Service Unavailable"},
		{msg: msg(5, nil), publicID: "m5", status: 410, err: "410 Gone"},
		{msg: msg(6, nil), publicID: "m6", err: "connection refused"},
	})

	require.Equal(t, []store.Receipt{{MessageID: 1, Token: 10}}, s.acks)
	require.Equal(t, map[nackKey][]store.Receipt{
		{delay: wait, err: "503 Service Unavailable"}: {{MessageID: 2, Token: 20}},
		{delay: -1, err: "503 Service Unavailable"}:   {{MessageID: 3, Token: 30}, {MessageID: 4, Token: 40}},
		{delay: -1, err: "410 Gone"}:                  {{MessageID: 5, Token: 50}},
		{delay: -1, err: "connection refused"}:        {{MessageID: 6, Token: 60}},
	}, s.nacks)
	require.True(t, s.succeeded)
	require.True(t, s.gone)
	require.True(t, s.grouped, "message 2 has a group")

	require.Len(t, s.attempts, 6)
	require.Equal(t, "m1", s.attempts[0].MessageID)
	require.True(t, s.attempts[0].OK)
	require.Equal(t, 2, s.attempts[0].Attempt)
	require.Equal(t, 200, *s.attempts[0].StatusCode)
	require.Nil(t, s.attempts[0].Error)
	require.False(t, s.attempts[5].OK)
	require.Nil(t, s.attempts[5].StatusCode, "no response, no status")
	require.Equal(t, "connection refused", *s.attempts[5].Error)

	require.Equal(t, []told{{"ok", true}, {"failed", false}, {"failed", false}, {"failed", false}, {"gone", false}, {"failed", false}}, observed)
}

// A round of 2xx without a group is acks alone: nothing grouped or gone.
func TestSettleTallyQuietRound(t *testing.T) {
	t.Parallel()
	r := &targetRun{p: &Pusher{}}
	s := r.tally([]pushResult{{msg: store.Message{ID: 1}, publicID: "m1", status: 204}})
	require.Len(t, s.acks, 1)
	require.Empty(t, s.nacks)
	require.False(t, s.grouped)
	require.False(t, s.gone)
}
