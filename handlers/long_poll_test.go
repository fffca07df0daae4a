package handlers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// A long poll re-checks its key before each claim or read after a wait:
// a key deleted or expired while the poll is parked gets the 401 a new
// request would, and what arrives meanwhile is left for another key.

// longPollCase is one kind of long poll: the permissions its key needs,
// the resource it waits on, the request, what wakes it (the id of what it
// would deliver), and the read, with another key, that finds that still
// there.
type longPollCase struct {
	name  string
	perms []any
	setup func(t *testing.T, env *ferrytest.Env)
	poll  func(env *ferrytest.Env, secret string) asyncResult
	wake  func(t *testing.T, env *ferrytest.Env) string
	still func(t *testing.T, env *ferrytest.Env, secret string) []string
}

func longPollCases() []longPollCase {
	return []longPollCase{{
		name:  "queue receive",
		perms: []any{kperm("queue:lq", "receive")},
		setup: func(t *testing.T, env *ferrytest.Env) { putQueue(t, env, "lq", nil) },
		poll: func(env *ferrytest.Env, secret string) asyncResult {
			return doAsyncAs(env, secret, "POST", qpath("lq", "/receive"), map[string]any{"wait_seconds": 10})
		},
		wake: func(t *testing.T, env *ferrytest.Env) string { return send(t, env, "lq", msg("m"))[0].ID },
		still: func(t *testing.T, env *ferrytest.Env, secret string) []string {
			got, err := decodeReceived(doAsyncAs(env, secret, "POST", qpath("lq", "/receive"), nil))
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, 1, got[0].ReceiveCount, "never claimed before")
			return msgIDs(got)
		},
	}, {
		name:  "subscription receive",
		perms: []any{kperm("subscription:st/s", "receive")},
		setup: func(t *testing.T, env *ferrytest.Env) {
			putTopic(t, env, "st", map[string]any{"partitions": 1}, http.StatusCreated)
			putSub(t, env, "st", "s", nil, http.StatusCreated)
		},
		poll: func(env *ferrytest.Env, secret string) asyncResult {
			return doAsyncAs(env, secret, "POST", spath("st", "s", "/receive"), map[string]any{"wait_seconds": 10})
		},
		wake: func(t *testing.T, env *ferrytest.Env) string { return publishEvents(t, env, "st", evt("x"))[0].ID },
		still: func(t *testing.T, env *ferrytest.Env, secret string) []string {
			res := doAsyncAs(env, secret, "POST", spath("st", "s", "/receive"), nil)
			requireOK(t, res)
			got := decodeSubMessages(t, res.body)
			require.Len(t, got, 1)
			require.Equal(t, 1, got[0].ReceiveCount, "never claimed before")
			return subIDs(got)
		},
	}, {
		name:  "event read",
		perms: []any{kperm("topic:et", "read")},
		setup: func(t *testing.T, env *ferrytest.Env) {
			putTopic(t, env, "et", map[string]any{"partitions": 1}, http.StatusCreated)
		},
		poll: func(env *ferrytest.Env, secret string) asyncResult {
			return doAsyncAs(env, secret, "GET", tpath("et", "/events")+"?partition=0&wait_seconds=10", nil)
		},
		wake: func(t *testing.T, env *ferrytest.Env) string { return publishEvents(t, env, "et", evt("x"))[0].ID },
		still: func(t *testing.T, env *ferrytest.Env, secret string) []string {
			res := doAsyncAs(env, secret, "GET", tpath("et", "/events")+"?partition=0", nil)
			requireOK(t, res)
			return pluck(decodePage(t, res.body).Events, func(e eventJSON) string { return e.ID })
		},
	}, {
		name:  "group poll",
		perms: []any{kperm("group:gt/g", "consume")},
		setup: func(t *testing.T, env *ferrytest.Env) {
			putTopic(t, env, "gt", map[string]any{"partitions": 1}, http.StatusCreated)
		},
		poll: func(env *ferrytest.Env, secret string) asyncResult {
			return doAsyncAs(env, secret, "POST", gpath("gt", "g", "/poll"), map[string]any{"consumer": "a", "wait_seconds": 10})
		},
		wake: func(t *testing.T, env *ferrytest.Env) string { return publishEvents(t, env, "gt", evt("x"))[0].ID },
		still: func(t *testing.T, env *ferrytest.Env, secret string) []string {
			// The same member, with another key: its fetch position did not
			// move past the event.
			res := doAsyncAs(env, secret, "POST", gpath("gt", "g", "/poll"), map[string]any{"consumer": "a"})
			requireOK(t, res)
			got, err := decodeGroupPoll(res.body)
			require.NoError(t, err)
			return pluck(got.Events, func(e eventJSON) string { return e.ID })
		},
	}}
}

// keyRefused reports whether a fresh request with the key's secret gets
// 401 (a list: any valid key may ask for it).
func keyRefused(env *ferrytest.Env, secret string) bool {
	return env.DoWith("GET", "/v1/queues", nil, bearer(secret)).Status == http.StatusUnauthorized
}

// requirePollRefused requires a long poll's answer to be the 401 of an
// invalid key.
func requirePollRefused(t *testing.T, res asyncResult, what string) {
	t.Helper()
	require.NoError(t, res.err)
	requireUnauthorized(t, res.response(), what)
}

// A key deleted while its long poll is parked: the poll answers 401 when
// it wakes, and what woke it is left for another key.
func TestLongPollKeyDeletedWhileParked(t *testing.T) {
	t.Parallel()
	for _, tc := range longPollCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := ferrytest.Start(t)
			tc.setup(t, env)
			doomed := createKey(t, env, "doomed", nil, tc.perms...)
			other := createKey(t, env, "other", nil, tc.perms...)
			done := parked(t, tc.name, env, func() asyncResult { return tc.poll(env, doomed.Key) })
			require.Equal(t, http.StatusNoContent, env.Do("DELETE", "/v1/keys/"+doomed.ID, nil).Status)
			ferrytest.WaitFor(t, 5*time.Second, "the deleted key to be refused", func() bool { return keyRefused(env, doomed.Key) })
			id := tc.wake(t, env)
			requirePollRefused(t, <-done, tc.name)
			require.Equal(t, []string{id}, tc.still(t, env, other.Key))
		})
	}
}

// A key that expires while its long poll is parked: the poll answers 401
// when it wakes, and the message is left for another key.
func TestLongPollKeyExpiresWhileParked(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	tc := longPollCases()[0]
	tc.setup(t, env)
	expires := time.Now().Add(3 * time.Second)
	short := createKey(t, env, "short", &expires, tc.perms...)
	other := createKey(t, env, "other", nil, tc.perms...)
	done := parked(t, tc.name, env, func() asyncResult { return tc.poll(env, short.Key) })
	ferrytest.WaitFor(t, 10*time.Second, "the key to expire", func() bool { return keyRefused(env, short.Key) })
	require.False(t, time.Now().Before(expires), "refused before it expired")
	id := tc.wake(t, env)
	requirePollRefused(t, <-done, tc.name)
	require.Equal(t, []string{id}, tc.still(t, env, other.Key))
}
