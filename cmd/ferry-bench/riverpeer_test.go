package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRiverParamsGoToTheBenchQueueWithTheBenchBody(t *testing.T) {
	t.Parallel()
	p := riverParams(3, 42)
	require.Len(t, p, 3)
	for _, one := range p {
		require.Equal(t, riverQueue, one.InsertOpts.Queue, "never River's default queue, which Ferry's client works")
		require.Equal(t, riverKind, one.Args.Kind())
		enc, err := json.Marshal(one.Args)
		require.NoError(t, err)
		require.JSONEq(t, `{"payload":`+body+`,"sent_ns":42}`, string(enc))
	}
	enc, err := json.Marshal(riverParams(1, 0)[0].Args)
	require.NoError(t, err)
	require.JSONEq(t, `{"payload":`+body+`}`, string(enc), "no start time outside the latency part")
}
