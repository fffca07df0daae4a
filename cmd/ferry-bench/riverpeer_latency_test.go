package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTimedSendRequestCarriesTheStartInEveryBody(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 123)
	var req struct {
		Messages []struct {
			Body struct {
				SentNs  int64  `json:"sent_ns"`
				OrderID string `json:"order_id"`
			} `json:"body"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(timedSendRequest(t0), &req))
	require.Len(t, req.Messages, peerPerTick)
	for _, m := range req.Messages {
		require.Equal(t, t0.UnixNano(), m.Body.SentNs)
		require.Equal(t, "ORD-0000000", m.Body.OrderID, "the rest of the bench body follows")
	}
}

func TestPeerSamplesCountOnlyInsertsAfterTheWarmUp(t *testing.T) {
	t.Parallel()
	from := time.Unix(100, 0)
	s := &peerSamples{from: from.UnixNano()}
	s.add(from.Add(-time.Millisecond).UnixNano(), from, true) // warm-up: left out
	s.add(from.UnixNano(), from.Add(3*time.Millisecond), false)
	s.add(from.UnixNano(), from.Add(7*time.Millisecond), true)
	require.Equal(t, 1, s.doneCount())
	r := s.result(10)
	require.Equal(t, peerLatency{sent: 10, handed: 1, done: 1,
		handedAt: Summarize([]time.Duration{3 * time.Millisecond}), doneAt: Summarize([]time.Duration{7 * time.Millisecond})}, r)
}
