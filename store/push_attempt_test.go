package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Attempts are listed newest first, filtered by outcome, and expire.
func TestPushAttempts(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	q := e.pushQueue(e.name("hooks"))
	code500, code204 := 500, 204
	msg := "HTTP 500"
	now := time.Now()
	require.NoError(t, store.PushAttemptRecord(e.ctx, e.db, q.ID, []store.PushAttempt{
		{MessageID: "1", Attempt: 1, StatusCode: &code500, Error: &msg, Duration: 12 * time.Millisecond, At: now.Add(-2 * time.Second)},
		{MessageID: "1", Attempt: 2, OK: true, StatusCode: &code204, Duration: 3 * time.Millisecond, At: now.Add(-time.Second)},
		{MessageID: "2", Attempt: 1, Error: ptr("timeout"), Duration: time.Second, At: now.Add(-100 * time.Hour)},
	}))
	all, err := store.PushAttemptList(e.ctx, e.db, q.ID, "", 10)
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.Equal(t, 2, all[0].Attempt, "newest first")
	require.Equal(t, 12*time.Millisecond, all[1].Duration)
	require.Nil(t, all[2].StatusCode)
	failed, err := store.PushAttemptList(e.ctx, e.db, q.ID, "failed", 10)
	require.NoError(t, err)
	require.Len(t, failed, 2)
	ok, err := store.PushAttemptList(e.ctx, e.db, q.ID, "succeeded", 10)
	require.NoError(t, err)
	require.Len(t, ok, 1)

	n, err := store.PushAttemptExpire(e.ctx, e.db, 72*time.Hour, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	all, err = store.PushAttemptList(e.ctx, e.db, q.ID, "", 10)
	require.NoError(t, err)
	require.Len(t, all, 2)
}
