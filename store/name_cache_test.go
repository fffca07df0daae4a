package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// The Sender reads queue configurations through a cache. A stale entry may
// delay a configuration change (documented), but must not make a send to
// an existing queue fail.
func TestSendQueueCache(t *testing.T) {
	t.Parallel()

	t.Run("RecreatedQueue", func(t *testing.T) {
		// Another instance deletes the queue and creates it again under
		// the same name while this instance's cache still holds the old
		// one: the send must reach the new queue, not answer "not found".
		t.Parallel()
		e := newEnv(t)
		sender := e.newSender(store.SenderConfig{Queues: store.NewQueueCache(time.Hour)})
		q := e.queue("again", store.QueuePatch{})
		_, _, err := sender.Send(e.ctx, q.Name, []store.SendMessage{msg(0)})
		require.NoError(t, err)

		tx, err := e.pool.Begin(e.ctx)
		require.NoError(t, err)
		_, err = store.QueueDelete(e.ctx, tx, q.Name)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(e.ctx))
		for {
			n, err := store.QueueDeleteContent(e.ctx, e.pool, q.ID, 100)
			require.NoError(t, err)
			if n == 0 {
				break
			}
		}
		fresh := e.queue(q.Name, store.QueuePatch{})

		res, qid, err := sender.Send(e.ctx, q.Name, []store.SendMessage{msg(1)})
		require.NoError(t, err, "send to an existing queue")
		require.Equal(t, fresh.ID, qid)
		require.Len(t, res, 1)
		require.EqualValues(t, 1, e.live(fresh))
	})

	t.Run("Forget", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		cache := store.NewQueueCache(time.Hour)
		sender := e.newSender(store.SenderConfig{Queues: cache})
		q := e.queue("limited", store.QueuePatch{})
		_, _, err := sender.Send(e.ctx, q.Name, []store.SendMessage{msg(0), msg(1)})
		require.NoError(t, err)
		_, _, err = store.QueueUpsert(e.ctx, e.pool, q.Name, store.QueuePatch{MaxDepth: ptr[int64](2)})
		require.NoError(t, err)
		cache.Forget(q.Name)
		_, _, err = sender.Send(e.ctx, q.Name, []store.SendMessage{msg(2)})
		var full *store.QueueFullError
		require.ErrorAs(t, err, &full)
	})
}
