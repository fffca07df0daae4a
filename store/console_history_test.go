package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestActivityFlush proves the console's history: a flush with nothing
// noted issues no statement at all (idle means quiet: here it would panic
// on the nil database); two instances' counts of one minute add up in one
// row whose depth and dead letters are the queue's; a deleted queue's
// noted traffic is skipped and its samples go with it.
func TestActivityFlush(t *testing.T) {
	t.Parallel()
	e, q := txQueueSetup("hist", store.QueuePatch{})(t)
	require.NoError(t, store.NewActivity().Flush(e.ctx, nil), "nothing noted: no statement")
	var nilActivity *store.Activity
	nilActivity.Note("", q.Name, 1, 1)
	require.NoError(t, nilActivity.Flush(e.ctx, nil))

	e.send(q, msg(0), msg(1), msg(2))
	got := e.claim(q, 1, time.Minute)
	e.deadLetter(q, got, "bad")
	one, two := store.NewActivity(), store.NewActivity()
	one.Note("", q.Name, 2, 0)
	one.Note("", q.Name, 1, 1)
	two.Note("", q.Name, 0, 4)
	two.Note("", "no-such-queue", 9, 9)
	require.NoError(t, one.Flush(e.ctx, e.tx))
	require.NoError(t, two.Flush(e.ctx, e.tx))
	require.NoError(t, one.Flush(e.ctx, nil), "a flush forgets what it wrote")

	samples, err := store.QueueSampleList(e.ctx, e.tx, "", q.Name, time.Hour)
	require.NoError(t, err)
	require.Len(t, samples, 1)
	require.Equal(t, store.QueueSample{Minute: samples[0].Minute, Depth: 2, DeadLetters: 1, Sent: 3, Acked: 5}, samples[0])
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.queue_samples s LEFT JOIN ferry.queues q ON q.id = s.queue_id WHERE q.id IS NULL`))

	_, err = e.tx.Exec(e.ctx, `DELETE FROM ferry.queues WHERE id = $1`, q.ID)
	require.NoError(t, err)
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.queue_samples WHERE queue_id = $1`, q.ID))
}
