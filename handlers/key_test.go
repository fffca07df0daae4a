package handlers_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/store"
)

// The scoped keys of the database (POST/GET/DELETE /v1/keys), through the
// server's real resolver: the admin key, then the key store.

var (
	keyKeys        = []string{"id", "name", "permissions", "created_at", "expires_at", "last_used_at"}
	createdKeyKeys = append([]string{"key"}, keyKeys...)
)

// createKey makes a key with the admin key; it must be created. perms
// are kperm's maps or any value that encodes as a permission.
func createKey(t testing.TB, env *ferrytest.Env, name string, expires *time.Time, perms ...any) client.Key {
	t.Helper()
	req := client.KeyRequest{Name: name, ExpiresAt: expires, Permissions: []client.Permission{}}
	for _, p := range perms {
		req.Permissions = append(req.Permissions, typed[client.Permission](t, p))
	}
	k, err := api(env).CreateKey(t.Context(), req)
	require.NoError(t, err, "create key %s", name)
	require.NotEmpty(t, k.Secret, "a created key shows its secret")
	return *k
}

func kperm(resource string, actions ...string) map[string]any {
	return map[string]any{"resource": resource, "actions": actions}
}

func sendOne(env *ferrytest.Env, queue, secret string) ferrytest.Response {
	env.T.Helper()
	return env.DoWith("POST", qpath(queue, "/messages"), map[string]any{"messages": []any{map[string]any{"body": 1}}}, bearer(secret))
}

// A key made through the API works at once for what it may do, and gets
// 403 naming the permission for what it may not (the key routes need
// admin); list and get show it, never its secret.
func TestKeyCreateAndUse(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "billing-eu", nil)
	putQueue(t, env, "orders", nil)
	k := createKey(t, env, "billing-worker", nil, kperm("queue:billing-*", "send", "receive", "send"))
	require.True(t, strings.HasPrefix(k.Secret, store.KeySecretPrefix), k.Secret)
	require.Equal(t, "billing-worker", k.Name)
	require.Equal(t, []client.Permission{{Resource: "queue:billing-*", Actions: []string{"send", "receive"}}}, k.Permissions, "repeated actions are kept once")
	require.Nil(t, k.ExpiresAt)
	require.Nil(t, k.LastUsedAt)

	r := sendOne(env, "billing-eu", k.Secret)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r = env.DoWith("POST", qpath("billing-eu", "/receive"), nil, bearer(k.Secret))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	for _, c := range []struct{ method, path, want string }{
		{"GET", qpath("billing-eu"), "queue:billing-eu read"},
		{"POST", qpath("orders", "/messages"), "queue:orders send"},
		{"DELETE", qpath("billing-eu"), "queue:billing-eu manage"},
		{"POST", "/v1/keys", "admin"},
		{"GET", "/v1/keys", "admin"},
		{"GET", "/v1/keys/" + k.ID, "admin"},
		{"DELETE", "/v1/keys/" + k.ID, "admin"},
	} {
		p := requireProblem(t, env.DoWith(c.method, c.path, nil, bearer(k.Secret)), http.StatusForbidden, "forbidden")
		require.Contains(t, p["detail"], c.want, "%s %s", c.method, c.path)
	}

	got := env.Do("GET", "/v1/keys/"+k.ID, nil)
	require.Equal(t, http.StatusOK, got.Status, "%s", got.Body)
	requireKeys(t, got.Map(t), keyKeys, "a key")
	require.NotContains(t, string(got.Body), k.Secret)
	require.Contains(t, string(got.Body), `"billing-worker"`)

	// A key with admin makes and deletes keys.
	admin := createKey(t, env, "ops", nil, kperm("admin", "*"))
	r = env.DoWith("POST", "/v1/keys", map[string]any{"name": "x", "permissions": []any{}}, bearer(admin.Secret))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var made client.Key
	r.JSON(t, &made)
	require.Equal(t, http.StatusNoContent, env.DoWith("DELETE", "/v1/keys/"+made.ID, nil, bearer(admin.Secret)).Status)

	// Lists page, oldest first, never with a secret.
	var ids []string
	after := ""
	for {
		path := "/v1/keys?limit=1"
		if after != "" {
			path += "&after=" + after
		}
		r := env.Do("GET", path, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		require.NotContains(t, string(r.Body), k.Secret)
		require.NotContains(t, string(r.Body), admin.Secret)
		requireKeys(t, r.Map(t), []string{"keys", "next"}, "a page of keys")
		var page struct {
			Keys []client.Key `json:"keys"`
			Next *string      `json:"next"`
		}
		r.JSON(t, &page)
		require.Len(t, page.Keys, 1, "%s", r.Body)
		require.Empty(t, page.Keys[0].Secret)
		ids = append(ids, page.Keys[0].ID)
		if page.Next == nil {
			break
		}
		after = *page.Next
	}
	require.Equal(t, []string{k.ID, admin.ID}, ids)
	requireProblem(t, env.Do("GET", "/v1/keys?after=bogus", nil), http.StatusBadRequest, "invalid_request")
}

// A key's secret appears in no line of the server's log, at debug level,
// through its creation, uses allowed and refused, its deletion and its
// use after (401).
func TestKeySecretNeverLogged(t *testing.T) {
	t.Parallel()
	var log ferrytest.LogBuffer
	env := ferrytest.StartLogging(t, &log)
	putQueue(t, env, "q1", nil)
	k := createKey(t, env, "logged", nil, kperm("queue:q*", "send"))
	require.Equal(t, http.StatusCreated, sendOne(env, "q1", k.Secret).Status)
	requireProblem(t, env.DoWith("GET", qpath("q1"), nil, bearer(k.Secret)), http.StatusForbidden, "forbidden")
	requireProblem(t, sendOne(env, "q2", k.Secret), http.StatusNotFound, "not_found")
	require.Equal(t, http.StatusOK, env.Do("GET", "/v1/keys", nil).Status)
	require.Equal(t, http.StatusNoContent, env.Do("DELETE", "/v1/keys/"+k.ID, nil).Status)
	requireProblem(t, sendOne(env, "q1", k.Secret), http.StatusUnauthorized, "unauthorized")
	env.Stop()

	out := log.String()
	require.Contains(t, out, "route=/v1/keys", "the log was captured (request lines at debug level)")
	body := strings.TrimPrefix(k.Secret, store.KeySecretPrefix)
	// (require.False: a failure must not print the log, secret and all.)
	require.False(t, strings.Contains(out, body[:16]), "the secret (or a prefix of its random part) is in the log")
}

// An expired key is a 401, like an unknown one; it worked until then.
func TestKeyExpired(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "q1", nil)
	expires := time.Now().Add(2 * time.Second)
	k := createKey(t, env, "short", &expires, kperm("queue:q1", "send"))
	require.NotNil(t, k.ExpiresAt)
	require.WithinDuration(t, expires, *k.ExpiresAt, time.Millisecond, "expires_at is kept as given")
	require.Equal(t, http.StatusCreated, sendOne(env, "q1", k.Secret).Status, "it works before it expires")
	ferrytest.WaitFor(t, 5*time.Second, "the key to expire", func() bool { return time.Now().After(expires) })
	p := requireProblem(t, sendOne(env, "q1", k.Secret), http.StatusUnauthorized, "unauthorized")
	require.Contains(t, p["detail"], "not valid")
	// Still listed (until deleted), with its expiry.
	require.Equal(t, http.StatusOK, env.Do("GET", "/v1/keys/"+k.ID, nil).Status)
}

// Unknown secrets are 401s: one Ferry could have made (well formed) and
// others.
func TestKeyUnknown(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	createKey(t, env, "real", nil, kperm("queue:*", "*"))
	for _, secret := range []string{store.NewKeySecret(), store.KeySecretPrefix + "abc", "ferry_sk_", ferrytest.AdminKey + "x"} {
		requireProblem(t, env.DoWith("GET", "/v1/queues", nil, bearer(secret)), http.StatusUnauthorized, "unauthorized")
	}
}

// A client hammering with one unknown key gets the same 401 each time and
// costs the database one lookup, not one per request (the key cache
// remembers unknown secrets for a few seconds).
func TestKeyUnknownCostsOneLookup(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	bad := store.NewKeySecret() // well formed: only the database can tell
	const requests = 40
	type answer struct {
		status int
		www    string
		body   []byte
		err    error
	}
	answers := make(chan answer, requests)
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() {
			req, err := http.NewRequest("GET", env.URL+"/v1/queues", nil)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			req.Header.Set("Authorization", "Bearer "+bad)
			resp, err := env.Client.Do(req)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			answers <- answer{resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body, err}
		})
	}
	wg.Wait()
	close(answers)
	want := requireProblem(t, env.DoWith("GET", "/v1/queues", nil, bearer(bad)), http.StatusUnauthorized, "unauthorized")
	require.Equal(t, "the API key is not valid", want["detail"])
	delete(want, "request_id")
	for a := range answers {
		require.NoError(t, a.err)
		require.Equal(t, http.StatusUnauthorized, a.status, "%s", a.body)
		require.Equal(t, `Bearer realm="ferry", error="invalid_token"`, a.www)
		var p map[string]any
		require.NoError(t, json.Unmarshal(a.body, &p))
		delete(p, "request_id")
		require.Equal(t, want, p, "every refusal is the same problem")
	}

	// Each lookup is one scan of ferry.api_keys; the server's idle
	// sessions flush their statistics first.
	ctx := context.Background()
	for _, c := range env.Server.Pool().AcquireAllIdle(ctx) {
		_, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		c.Release()
		require.NoError(t, err)
	}
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var scans int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0)
		FROM pg_stat_user_tables WHERE relid = 'ferry.api_keys'::regclass`).Scan(&scans))
	// One lookup, and one more if the server's notifier began listening
	// meanwhile: its first LISTEN empties the key cache.
	require.LessOrEqual(t, scans, int64(2), "lookups of ferry.api_keys for %d requests with one unknown key", requests+1)
}

// A deleted key is refused by every instance within a second: the one
// that deleted it at once, the other when it hears the NOTIFY.
func TestKeyDeleteRevokesEverywhere(t *testing.T) {
	t.Parallel()
	a := ferrytest.Start(t)
	b := ferrytest.StartOn(t, a.DatabaseURL)
	putQueue(t, a, "q1", nil)
	k := createKey(t, a, "revoked", nil, kperm("queue:q1", "send"))
	for _, env := range []*ferrytest.Env{a, b} {
		require.Equal(t, http.StatusCreated, sendOne(env, "q1", k.Secret).Status, "the key works (and is cached) on %s", env.URL)
		require.Equal(t, http.StatusCreated, sendOne(env, "q1", k.Secret).Status)
	}
	require.Equal(t, http.StatusNoContent, a.Do("DELETE", "/v1/keys/"+k.ID, nil).Status)
	deleted := time.Now()
	requireProblem(t, sendOne(a, "q1", k.Secret), http.StatusUnauthorized, "unauthorized")
	t.Logf("refused by the deleting instance after %v", time.Since(deleted))
	ferrytest.WaitFor(t, time.Second, "the other instance to refuse the deleted key", func() bool {
		return sendOne(b, "q1", k.Secret).Status == http.StatusUnauthorized
	})
	took := time.Since(deleted)
	t.Logf("refused by the other instance after %v", took)
	require.Less(t, took, time.Second)
	requireProblem(t, sendOne(b, "q1", k.Secret), http.StatusUnauthorized, "unauthorized")
	requireProblem(t, a.Do("GET", "/v1/keys/"+k.ID, nil), http.StatusNotFound, "not_found")
	requireProblem(t, a.Do("DELETE", "/v1/keys/"+k.ID, nil), http.StatusNotFound, "not_found")
}

func withKeyFlush(d time.Duration) ferrytest.Option {
	return func(c *server.Config) { c.KeyFlushEvery = d }
}

// last_used_at is written by the periodic flush, and by the last one at
// shutdown.
func TestKeyLastUsed(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, withKeyFlush(50*time.Millisecond))
	putQueue(t, env, "q1", nil)
	k := createKey(t, env, "used", nil, kperm("queue:q1", "send"))
	get := func(e *ferrytest.Env, id string) client.Key {
		k, err := api(e).GetKey(t.Context(), id)
		require.NoError(t, err)
		return *k
	}
	before := time.Now().Add(-time.Second)
	require.Equal(t, http.StatusCreated, sendOne(env, "q1", k.Secret).Status)
	ferrytest.WaitFor(t, 5*time.Second, "last_used_at to be written", func() bool { return get(env, k.ID).LastUsedAt != nil })
	require.WithinRange(t, *get(env, k.ID).LastUsedAt, before, time.Now().Add(time.Second))

	// An instance with the default interval (a minute) writes its uses
	// when it stops.
	other := ferrytest.StartOn(t, env.DatabaseURL)
	k2 := createKey(t, env, "used-elsewhere", nil, kperm("queue:q1", "send"))
	require.Equal(t, http.StatusCreated, sendOne(other, "q1", k2.Secret).Status)
	require.Nil(t, get(env, k2.ID).LastUsedAt, "not written before a minute or the shutdown")
	other.Stop()
	require.NotNil(t, get(env, k2.ID).LastUsedAt, "written at shutdown")
}

// The admin key is no stored key: it cannot be deleted (409) and is not
// shown; ids no key has, malformed ones included, are 404s.
func TestKeyAdminAndUnknownIDs(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	p := requireProblem(t, env.Do("DELETE", "/v1/keys/admin", nil), http.StatusConflict, "conflict")
	require.Contains(t, p["detail"], "FERRY_ADMIN_KEY")
	require.Equal(t, http.StatusOK, env.Do("GET", "/v1/keys", nil).Status, "the admin key still works")
	k := createKey(t, env, "ops", nil, kperm("admin", "*"))
	requireProblem(t, env.DoWith("DELETE", "/v1/keys/admin", nil, bearer(k.Secret)), http.StatusConflict, "conflict")
	for _, id := range []string{"admin", "key_999999", "key_0", "key_01", "nope", "key_", "key_1x", "key_99999999999999999999"} {
		requireProblem(t, env.Do("GET", "/v1/keys/"+id, nil), http.StatusNotFound, "not_found")
		if id != "admin" {
			requireProblem(t, env.Do("DELETE", "/v1/keys/"+id, nil), http.StatusNotFound, "not_found")
		}
	}
	requireProblem(t, env.Do("GET", "/v1/keys/"+k.ID+"?x=1", nil), http.StatusBadRequest, "invalid_request")
	require.Equal(t, http.StatusOK, env.Do("GET", "/v1/keys/"+k.ID, nil).Status)
}

// Bad bodies are 400s naming the field, and make no key.
func TestKeyBadBodies(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	many := make([]any, 1001)
	for i := range many {
		many[i] = kperm("queue:q", "send")
	}
	past := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	for _, c := range []struct {
		body  any
		field string
	}{
		{`{}`, "name"},
		{`{"name": "x"}`, "permissions"},
		{`{"name": "x", "permissions": null}`, "permissions"},
		{`{"permissions": []}`, "name"},
		{`{"name": "", "permissions": []}`, "name"},
		{`{"name": "two words", "permissions": []}`, "name"},
		{`{"name": "-x", "permissions": []}`, "name"},
		{map[string]any{"name": strings.Repeat("n", 129), "permissions": []any{}}, "name"},
		{`{"name": 7, "permissions": []}`, "name"},
		{`{"name": "x", "permissions": {}}`, "permissions"},
		{`{"name": "x", "permissions": [{"resource": "queue:a", "actions": ["send"]}, {"resource": "queue:b", "actions": ["publish"]}]}`, "permissions[1].actions"},
		{`{"name": "x", "permissions": [{"resource": "bucket:a", "actions": ["send"]}]}`, "permissions[0].resource"},
		{`{"name": "x", "permissions": [{"resource": "subscription:orders", "actions": ["read"]}]}`, "permissions[0].resource"},
		{`{"name": "x", "permissions": [{"resource": "queue:a/b", "actions": ["read"]}]}`, "permissions[0].resource"},
		{`{"name": "x", "permissions": [{"resource": "queue:a", "actions": []}]}`, "permissions[0].actions"},
		{`{"name": "x", "permissions": [{"resource": "queue:a"}]}`, "permissions[0].actions"},
		{`{"name": "x", "permissions": [null]}`, "permissions[0].resource"},
		{`{"name": "x", "permissions": [{"resource": "queue:a", "actions": ["send"], "extra": 1}]}`, "permissions[0].extra"},
		{map[string]any{"name": "x", "permissions": many}, "permissions"},
		{`{"name": "x", "permissions": [], "expires_at": "` + past + `"}`, "expires_at"},
		{`{"name": "x", "permissions": [], "expires_at": "tomorrow"}`, "expires_at"},
		{`{"name": "x", "permissions": [], "expires_at": 1}`, "expires_at"},
		{`{"name": "x", "permissions": [], "admin": true}`, "admin"},
		{`{"name": "x", "Name": "y", "permissions": []}`, ""},
		{`{"name": "x", "name": "y", "permissions": []}`, ""},
		{`null`, ""},
		{`[]`, ""},
		{`{"name": "x", "permissions": []} {}`, ""},
	} {
		p := requireProblem(t, env.Do("POST", "/v1/keys", c.body), http.StatusBadRequest, "invalid_request")
		if c.field != "" {
			errs, _ := p["errors"].([]any)
			require.NotEmpty(t, errs, "%v: %v", c.body, p)
			require.Equal(t, c.field, errs[0].(map[string]any)["field"], "%v: %v", c.body, p)
			require.Contains(t, p["detail"], c.field, "%v", c.body)
		}
	}
	requireProblem(t, env.Do("POST", "/v1/keys", nil), http.StatusBadRequest, "invalid_request")
	r := env.Do("GET", "/v1/keys", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.JSONEq(t, `{"keys": [], "next": null}`, string(r.Body), "no bad body made a key")
}
