package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// A push configuration is set, merged, shown once with its secret, and
// removed; changing the URL clears the failure state.
func TestPushConfigLifecycle(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	hooks := e.name("hooks")
	pull := e.name("pull")

	q, created, err := store.QueueUpsert(e.ctx, e.db, hooks, store.QueuePatch{Push: pushPatch("https://a.example/h", "whsec_one")})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "whsec_one", q.IssuedSecret, "the secret is shown by the upsert that issued it")
	require.Equal(t, &store.PushConfig{URL: "https://a.example/h", TimeoutSeconds: 10, MaxInFlight: 10, Format: store.PushFormatStandard}, q.Push)

	// A change of another field keeps the secret (none issued again).
	five := 5
	q, _, err = store.QueueUpsert(e.ctx, e.db, hooks, store.QueuePatch{Push: &store.PushPatch{MaxInFlight: &five, NewSecret: "whsec_two"}})
	require.NoError(t, err)
	require.Empty(t, q.IssuedSecret)
	require.Equal(t, 5, q.Push.MaxInFlight)
	require.Equal(t, "https://a.example/h", q.Push.URL)
	tgt, err := store.PushTargetGet(e.ctx, e.db, q.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"whsec_one"}, tgt.Secrets)
	require.False(t, tgt.Subscription)

	// Failing, then a new URL: the failure state is cleared.
	disabled, err := store.PushOutcome(e.ctx, e.db, store.PushOutcomeParams{QueueID: q.ID, DisableAfter: time.Hour})
	require.NoError(t, err)
	require.False(t, disabled)
	q, err = store.QueueGet(e.ctx, e.db, hooks)
	require.NoError(t, err)
	require.NotNil(t, q.FailingSince)
	q, _, err = store.QueueUpsert(e.ctx, e.db, hooks, store.QueuePatch{Push: pushPatch("https://b.example/h", "whsec_three")})
	require.NoError(t, err)
	require.Nil(t, q.FailingSince)
	require.Empty(t, q.IssuedSecret, "the target had a secret")

	// Removing push forgets the secrets; adding it again issues a new one.
	q, _, err = store.QueueUpsert(e.ctx, e.db, hooks, store.QueuePatch{Push: &store.PushPatch{Remove: true}})
	require.NoError(t, err)
	require.Nil(t, q.Push)
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.queues WHERE id = $1 AND signing_secret IS NOT NULL`, q.ID))
	q, _, err = store.QueueUpsert(e.ctx, e.db, hooks, store.QueuePatch{Push: pushPatch("https://c.example/h", "whsec_four")})
	require.NoError(t, err)
	require.Equal(t, "whsec_four", q.IssuedSecret)

	// A push member without a URL on a target without push is refused.
	_, _, err = store.QueueUpsert(e.ctx, e.db, pull, store.QueuePatch{Push: &store.PushPatch{MaxInFlight: &five}})
	var verr *store.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, "push.url", verr.Field)
}

// A patch with KeepURL may repeat the URL the queue pushes to and change
// its other push settings, but fails with ErrPushURLKept, changing
// nothing, when its URL is another one or the queue has none (or does not
// exist: it is not created).
func TestPushPatchKeepURL(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	hooks, pull, missing := e.name("hooks"), e.name("pull"), e.name("missing")
	e.pushTarget(hooks, "whsec_one")
	_, _, err := store.QueueUpsert(e.ctx, e.db, pull, store.QueuePatch{})
	require.NoError(t, err)

	keep := func(url string) *store.PushPatch {
		three := 3
		return &store.PushPatch{URL: &url, MaxInFlight: &three, NewSecret: "whsec_two", KeepURL: true}
	}
	q, _, err := store.QueueUpsert(e.ctx, e.db, hooks, store.QueuePatch{Push: keep("https://a.example/h")})
	require.NoError(t, err)
	require.Equal(t, &store.PushConfig{URL: "https://a.example/h", TimeoutSeconds: 10, MaxInFlight: 3, Format: store.PushFormatStandard}, q.Push)

	for _, name := range []string{hooks, pull, missing} {
		_, _, err := store.QueueUpsert(e.ctx, e.db, name, store.QueuePatch{Push: keep("https://b.example/h")})
		require.ErrorIs(t, err, store.ErrPushURLKept, name)
	}
	q, err = store.QueueGet(e.ctx, e.db, hooks)
	require.NoError(t, err)
	require.Equal(t, "https://a.example/h", q.Push.URL)
	q, err = store.QueueGet(e.ctx, e.db, pull)
	require.NoError(t, err)
	require.Nil(t, q.Push)
	_, err = store.QueueGet(e.ctx, e.db, missing)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// After a rotation both secrets sign until the overlap ends.
func TestSecretRotateOverlap(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	q := e.pushTarget(e.name("hooks"), "whsec_old")
	require.NoError(t, store.SecretRotate(e.ctx, e.db, q.ID, "whsec_new", time.Hour))
	tgt, err := store.PushTargetGet(e.ctx, e.db, q.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"whsec_new", "whsec_old"}, tgt.Secrets)

	_, err = e.db.Exec(e.ctx, `UPDATE ferry.queues SET previous_secret_until = now() - interval '1 second' WHERE id = $1`, q.ID)
	require.NoError(t, err)
	tgt, err = store.PushTargetGet(e.ctx, e.db, q.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"whsec_new"}, tgt.Secrets, "the old secret stops signing when the overlap ends")

	pull := e.queue(e.name("pull"), store.QueuePatch{})
	require.ErrorIs(t, store.SecretRotate(e.ctx, e.db, pull.ID, "whsec_x", time.Hour), store.ErrNotFound)
}
