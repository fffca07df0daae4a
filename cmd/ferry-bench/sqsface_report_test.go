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
		s := sqsFaceSection(rest, Phase{Messages: sqs, Elapsed: time.Second}, []float64{0.9, 0.7}, "how")
		head := s.Rows[0]
		require.Equal(t, "10,000 msgs/s", head.Raw, "REST is the left column")
		require.NotNil(t, head.Pass)
		require.Equal(t, ok, *head.Pass, "SQS at %d msgs/s", sqs)
		require.Equal(t, "0.90 · 0.70", s.Rows[1].Ratio)
		require.Equal(t, Columns{Raw: "REST", Ferry: "SQS", Ratio: "SQS/REST"}, s.columns())
	}
	// No REST rate: nothing to compare with, so no pass.
	s := sqsFaceSection(Phase{}, rest, nil, "how")
	require.False(t, *s.Rows[0].Pass)
}
