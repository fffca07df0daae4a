package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

func pushPatch(url, secret string) *store.PushPatch {
	return &store.PushPatch{URL: &url, NewSecret: secret}
}

// pushTarget creates or changes queue name to push to
// https://a.example/h with the given new secret.
func (e *env) pushTarget(name, secret string) store.Queue {
	e.t.Helper()
	q, _, err := store.QueueUpsert(e.ctx, e.db, name, store.QueuePatch{Push: pushPatch("https://a.example/h", secret)})
	require.NoError(e.t, err)
	return q
}

// pushQueue is a push target with secret whsec_x.
func (e *env) pushQueue(name string) store.Queue { return e.pushTarget(name, "whsec_x") }

// PushOutcome: failures start the failure state once, a success clears
// it, 410 disables at once, and failing for longer than DisableAfter
// disables with a reason; PushEnable turns push back on.
func TestPushOutcomeDisables(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.pushQueue("hooks")
	get := func() store.Queue {
		q, err := store.QueueGet(e.ctx, e.pool, "hooks")
		require.NoError(t, err)
		return q
	}

	disabled, err := store.PushOutcome(e.ctx, e.pool, store.PushOutcomeParams{QueueID: q.ID, DisableAfter: time.Hour})
	require.NoError(t, err)
	require.False(t, disabled)
	first := get().FailingSince
	require.NotNil(t, first)
	_, err = store.PushOutcome(e.ctx, e.pool, store.PushOutcomeParams{QueueID: q.ID, DisableAfter: time.Hour})
	require.NoError(t, err)
	require.Equal(t, first.UnixMicro(), get().FailingSince.UnixMicro(), "a run of failures keeps its start")

	_, err = store.PushOutcome(e.ctx, e.pool, store.PushOutcomeParams{QueueID: q.ID, Succeeded: true, DisableAfter: time.Hour})
	require.NoError(t, err)
	require.Nil(t, get().FailingSince)

	// Failing for longer than DisableAfter disables.
	_, err = store.PushOutcome(e.ctx, e.pool, store.PushOutcomeParams{QueueID: q.ID, DisableAfter: time.Hour})
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `UPDATE ferry.queues SET push_failing_since = now() - interval '2 hours' WHERE id = $1`, q.ID)
	require.NoError(t, err)
	disabled, err = store.PushOutcome(e.ctx, e.pool, store.PushOutcomeParams{QueueID: q.ID, DisableAfter: time.Hour})
	require.NoError(t, err)
	require.True(t, disabled)
	got := get()
	require.NotNil(t, got.DisabledAt)
	require.Contains(t, *got.DisabledReason, "every attempt failed since")
	sw, err := store.PushSweep(e.ctx, e.pool, ownerA)
	require.NoError(t, err)
	require.NotContains(t, sw.Targets, q.ID, "a disabled target is not pushed")

	require.NoError(t, store.PushEnable(e.ctx, e.pool, q.ID))
	got = get()
	require.Nil(t, got.DisabledAt)
	require.Nil(t, got.FailingSince)

	// 410 Gone disables at once, with the reason given.
	disabled, err = store.PushOutcome(e.ctx, e.pool, store.PushOutcomeParams{QueueID: q.ID, DisableReason: "the endpoint answered 410 Gone", DisableAfter: time.Hour})
	require.NoError(t, err)
	require.True(t, disabled)
	require.Equal(t, "the endpoint answered 410 Gone", *get().DisabledReason)

	// Enabling a target without push is not found.
	pull := e.queue("pull", store.QueuePatch{})
	require.ErrorIs(t, store.PushEnable(e.ctx, e.pool, pull.ID), store.ErrNotFound)
}
