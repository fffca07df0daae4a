package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestRedriveKeepsOrderedGroupClaimable: DeadLetterRedrive computes each
// redriven row's "waiting" flag before ON CONFLICT DO NOTHING drops rows
// whose event is pending again. When the dropped row was the one chosen as
// its group's head (row_number() = 1), the rest of the group is inserted
// waiting behind no head, and nothing ever promotes it.
func TestRedriveKeepsOrderedGroupClaimable(t *testing.T) {
	e, tp := newTopicEnv(t, "t", 1)
	s, _ := e.subscribe(tp, "s", "", store.SubscriptionPatch{
		Ordered: ptr(true),
		Queue:   store.QueuePatch{MaxReceives: ptr(1)},
	})
	key := "K"
	e.publish(tp,
		store.PublishEvent{ID: "e1", Type: "x", Key: &key},
		store.PublishEvent{ID: "e2", Type: "x", Key: &key})

	// Both events dead-lettered, one after the other (ordered: e2 waits
	// behind e1 until e1 is gone).
	for _, want := range []string{"e1", "e2"} {
		got := e.claim(s.Queue, 10, time.Minute)
		require.Len(t, got, 1)
		require.Equal(t, want, *got[0].EventID)
		_, dead := e.nack(store.NackParams{Queue: s.Queue, Receipts: receipts(got)})
		require.Equal(t, 1, dead)
	}
	require.EqualValues(t, 2, e.deadLetters(s.Queue))

	// The subscription stops being ordered and is rewound: e1 and e2 are
	// pending again, ungrouped. The consumer handles e2 only.
	s2, created, _, err := store.SubscriptionUpsert(e.ctx, e.pool, tp, "s", store.SubscriptionPatch{
		Ordered: ptr(false),
		Queue:   store.QueuePatch{MaxReceives: ptr(5)},
	})
	require.NoError(t, err)
	require.False(t, created)
	n, err := store.SubscriptionSeek(e.ctx, e.pool, s2, store.StartPosition{Earliest: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	got := e.claim(s2.Queue, 10, time.Minute)
	require.Len(t, got, 2)
	var e1 store.Message
	for _, m := range got {
		if *m.EventID == "e2" {
			require.Equal(t, []bool{true}, e.ack(s2.Queue, m.Receipt))
		} else {
			e1 = m
		}
	}

	// Redrive both dead letters: e1's is dropped (its event is pending),
	// e2's goes back into the queue.
	redriven, err := store.DeadLetterRedrive(e.ctx, e.pool, store.RedriveParams{QueueID: s2.ID, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 1, redriven, "e2 redriven")

	// Finish e1's pending delivery. e2 is now the only message of the
	// subscription: it must be deliverable.
	require.Equal(t, []bool{true}, e.ack(s2.Queue, e1.Receipt))
	for _, d := range e.deliveries(s2.ID) {
		t.Logf("live delivery: event %s grp %v waiting %v", d.EventID, deref(d.Grp), d.Waiting)
	}
	again := e.claim(s2.Queue, 10, time.Minute)
	require.Len(t, again, 1, "the redriven e2 can never be claimed: it waits behind a head that was never inserted")
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}
