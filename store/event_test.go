package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Events read back carry what was published.
func TestEventRoundTrip(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	name := e.name("rt")
	tp := e.topic(name, store.TopicPatch{Partitions: ptr(1)})
	before := time.Now()
	e.publish(tp,
		store.PublishEvent{ID: "full", Type: "order.created", Key: ptr("ORD-1"), Data: json.RawMessage(`{"b": [1, 2], "a": "x"}`), Attributes: json.RawMessage(`{"region":"eu"}`)},
		store.PublishEvent{ID: "bare", Type: "ping"},
		store.PublishEvent{ID: "scalar", Type: "n", Data: json.RawMessage(`42`)},
	)
	evs, next := e.read(store.ReadParams{Topic: tp})
	require.EqualValues(t, 3, next)
	require.Len(t, evs, 3)
	require.Equal(t, "full", evs[0].ID)
	require.Equal(t, "order.created", evs[0].Type)
	require.Equal(t, ptr("ORD-1"), evs[0].Key)
	require.JSONEq(t, `{"a":"x","b":[1,2]}`, string(evs[0].Data))
	require.JSONEq(t, `{"region":"eu"}`, string(evs[0].Attributes))
	require.Nil(t, evs[1].Key)
	require.Nil(t, evs[1].Data)
	require.Nil(t, evs[1].Attributes)
	require.JSONEq(t, `42`, string(evs[2].Data))
	for _, ev := range evs {
		require.WithinDuration(t, before, ev.PublishedAt, time.Minute)
	}
	// Limit pages through in order.
	evs, next = e.read(store.ReadParams{Topic: tp, FromOffset: 1, Limit: 1})
	require.Equal(t, []int64{1}, eventOffsets(evs))
	require.EqualValues(t, 2, next)
	evs, next = e.read(store.ReadParams{Topic: tp, FromOffset: 3})
	require.Empty(t, evs)
	require.EqualValues(t, 3, next)
}
