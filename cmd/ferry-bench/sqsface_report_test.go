package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSQSFaceRowsJudgeSQSAgainstRESTAtEightTenths(t *testing.T) {
	t.Parallel()
	rest := Phase{Messages: 10_000, Elapsed: time.Second}
	for sqs, ok := range map[int64]bool{8_000: true, 9_500: true, 7_999: false, 0: false} {
		s := sqsFaceSection(rest, Phase{Messages: sqs, Elapsed: time.Second}, []float64{0.9, 0.7}, sqsWake{}, "how")
		head := s.Rows[0]
		require.Equal(t, "10,000 msgs/s", head.Raw, "REST is the left column")
		require.NotNil(t, head.Pass)
		require.Equal(t, ok, *head.Pass, "SQS at %d msgs/s", sqs)
		require.Equal(t, "0.90 · 0.70", s.Rows[1].Ratio)
		require.Equal(t, Columns{Raw: "REST", Ferry: "SQS", Ratio: "SQS/REST"}, s.columns())
	}
	// No REST rate: nothing to compare with, so no pass.
	s := sqsFaceSection(Phase{}, rest, nil, sqsWake{}, "how")
	require.False(t, *s.Rows[0].Pass)
}

func TestSQSWakeRowsJudgeP99AgainstFiftyMilliseconds(t *testing.T) {
	t.Parallel()
	var w sqsWake
	for cond := range w.wake {
		for s := range w.wake[cond] {
			w.wake[cond][s] = Summary{N: 200, P50: 3 * time.Millisecond, P99: 20 * time.Millisecond}
		}
	}
	w.wake[1][sendSQL] = Summary{N: 200, P50: 3 * time.Millisecond, P99: 50 * time.Millisecond}
	w.wake[0][sendREST] = Summary{}
	w.loaded = 1000
	rows := sqsWakeRows(w)
	require.Len(t, rows, 6)
	var failed []string
	for _, r := range rows {
		require.NotNil(t, r.Pass)
		if !*r.Pass {
			failed = append(failed, r.Metric)
		}
	}
	require.Equal(t, []string{
		"long-poll wake, REST send → ReceiveMessage, idle: p50 · p99",
		"long-poll wake, SQL ferry.send → ReceiveMessage, background 1,000 msgs/s: p50 · p99",
	}, failed, "p99 at 50 ms fails, and so does a case without samples")
	require.Equal(t, "3.00 ms · 20.0 ms", rows[0].Ferry)
}
