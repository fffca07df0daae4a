package server_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/sigv4"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// newSecretKey is a random FERRY_SECRET_KEY.
func newSecretKey(t *testing.T) string {
	t.Helper()
	raw := make([]byte, 32)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(raw)
}

func withSecretKey(key string, previous ...string) ferrytest.Option {
	return func(c *server.Config) {
		c.SecretKey = key
		if len(previous) > 0 {
			c.SecretKeyPrevious = previous[0]
		}
	}
}

type madeKey struct{ ID, Key string }

// makeKey makes a key over REST that may send to queue:billing-*.
func makeKey(t *testing.T, env *ferrytest.Env, name string) madeKey {
	t.Helper()
	r := env.Do("POST", "/v1/keys", map[string]any{"name": name, "permissions": []any{
		map[string]any{"resource": "queue:billing-*", "actions": []string{"send"}}}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var k madeKey
	r.JSON(t, &k)
	return k
}

// sendsWith reports whether secret may send to queue billing-eu over REST.
func sendsWith(t *testing.T, env *ferrytest.Env, secret string) bool {
	t.Helper()
	r := env.DoWith("POST", "/v1/queues/billing-eu/messages", map[string]any{"messages": []any{map[string]any{"body": 1}}},
		http.Header{"Authorization": {"Bearer " + secret}})
	require.Contains(t, []int{http.StatusCreated, http.StatusUnauthorized}, r.Status, "%s", r.Body)
	return r.Status == http.StatusCreated
}

// Server.SQSKey (the SQS face's KeyFunc) answers a key made over REST
// with its secret, as POST /v1/keys showed it, and the key with the
// permissions it has on REST; an id that is no key's, or not an id
// Ferry issued (admin is the SQS face's own), is sigv4.ErrUnknownKey. A
// key revoked through one instance is refused by another within a
// second, as is an expired one.
func TestSQSKey(t *testing.T) {
	t.Parallel()
	secretKey := newSecretKey(t)
	a := ferrytest.Start(t, withSecretKey(secretKey))
	b := ferrytest.StartOn(t, a.DatabaseURL, withSecretKey(secretKey))
	require.Equal(t, http.StatusCreated, a.Do("PUT", "/v1/queues/billing-eu", nil).Status)
	k := makeKey(t, a, "billing")
	ctx := context.Background()
	for _, env := range []*ferrytest.Env{a, b} {
		secret, key, err := env.Server.SQSKey(ctx, k.ID)
		require.NoError(t, err)
		require.Equal(t, k.Key, secret)
		require.Equal(t, k.ID, key.ID)
		require.Equal(t, "billing", key.Name)
		require.True(t, key.Allows(access.Queue, "billing-eu", access.Send), "the permissions of REST")
		require.False(t, key.Allows(access.Queue, "billing-eu", access.Receive))
		require.False(t, key.Allows(access.Queue, "orders", access.Send))
		require.False(t, key.Admin)
	}
	for _, id := range []string{"", "admin", "key_0", "key_999999", k.Key, strings.ToUpper(k.ID)} {
		_, _, err := a.Server.SQSKey(ctx, id)
		require.ErrorIs(t, err, sigv4.ErrUnknownKey, "%q", id)
	}

	require.Equal(t, http.StatusNoContent, a.Do("DELETE", "/v1/keys/"+k.ID, nil).Status)
	deleted := time.Now()
	ferrytest.WaitFor(t, time.Second, "the other instance to refuse the revoked key", func() bool {
		_, _, err := b.Server.SQSKey(ctx, k.ID)
		return err != nil
	})
	t.Logf("refused by the other instance %s after the delete", time.Since(deleted))
	_, _, err := b.Server.SQSKey(ctx, k.ID)
	require.ErrorIs(t, err, sigv4.ErrUnknownKey)

	expires := time.Now().Add(500 * time.Millisecond)
	r := a.Do("POST", "/v1/keys", map[string]any{"name": "brief", "permissions": []any{}, "expires_at": expires.Format(time.RFC3339Nano)})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var brief madeKey
	r.JSON(t, &brief)
	_, _, err = b.Server.SQSKey(ctx, brief.ID)
	require.NoError(t, err)
	ferrytest.WaitFor(t, 5*time.Second, "the key to expire", func() bool {
		_, _, err := b.Server.SQSKey(ctx, brief.ID)
		return err != nil
	})
	require.False(t, time.Now().Before(expires), "refused before it expired")
	_, _, err = b.Server.SQSKey(ctx, brief.ID)
	require.ErrorIs(t, err, sigv4.ErrUnknownKey)
}

// Without FERRY_SECRET_KEY, serve says once that SQS works only for
// admin, and keys are made without a seal: they work over REST, and over
// SQS they are unknown, with a log line that says why. Configuring a
// server key later changes nothing for them (a hash gives no secret back)
// and makes the keys made from then on work over SQS.
func TestSQSKeyWithoutSeal(t *testing.T) {
	t.Parallel()
	var log ferrytest.LogBuffer
	plain := ferrytest.StartLogging(t, &log)
	require.Equal(t, 1, strings.Count(log.String(), "FERRY_SECRET_KEY is not set"), "%s", log.String())
	require.Equal(t, http.StatusCreated, plain.Do("PUT", "/v1/queues/billing-eu", nil).Status)
	old := makeKey(t, plain, "old")
	require.True(t, sendsWith(t, plain, old.Key))
	_, _, err := plain.Server.SQSKey(context.Background(), old.ID)
	require.ErrorIs(t, err, sigv4.ErrUnknownKey)
	require.Contains(t, log.String(), "SQS access key refused: its secret is not available")
	require.Contains(t, log.String(), "key_id="+old.ID)
	plain.Stop()

	sealed := ferrytest.StartOn(t, plain.DatabaseURL, withSecretKey(newSecretKey(t)))
	require.True(t, sendsWith(t, sealed, old.Key), "an old key keeps working over REST")
	_, _, err = sealed.Server.SQSKey(context.Background(), old.ID)
	require.ErrorIs(t, err, sigv4.ErrUnknownKey, "and still has no secret for SQS")
	replaced := makeKey(t, sealed, "old-replaced")
	secret, _, err := sealed.Server.SQSKey(context.Background(), replaced.ID)
	require.NoError(t, err)
	require.Equal(t, replaced.Key, secret)
	require.True(t, sendsWith(t, sealed, replaced.Key))
}

// Rotating FERRY_SECRET_KEY: an instance with the new key and the old one
// as FERRY_SECRET_KEY_PREVIOUS opens the old seals and reseals them at
// start, after which the new key alone serves every key; an instance
// whose server key sealed none of them answers them as unknown.
func TestSQSKeyRotation(t *testing.T) {
	t.Parallel()
	oldKey, newKey := newSecretKey(t), newSecretKey(t)
	first := ferrytest.Start(t, withSecretKey(oldKey))
	k := makeKey(t, first, "rotated")
	first.Stop()

	ctx := context.Background()
	wrong := ferrytest.StartOn(t, first.DatabaseURL, withSecretKey(newKey))
	_, _, err := wrong.Server.SQSKey(ctx, k.ID)
	require.ErrorIs(t, err, sigv4.ErrUnknownKey, "the new key alone does not open the old seal")
	wrong.Stop()

	rotating := ferrytest.StartOn(t, first.DatabaseURL, withSecretKey(newKey, oldKey))
	secret, _, err := rotating.Server.SQSKey(ctx, k.ID)
	require.NoError(t, err)
	require.Equal(t, k.Key, secret)
	rotating.Stop()

	done := ferrytest.StartOn(t, first.DatabaseURL, withSecretKey(newKey))
	secret, _, err = done.Server.SQSKey(ctx, k.ID)
	require.NoError(t, err, "resealed under the new key at the rotating start")
	require.Equal(t, k.Key, secret)
}

// A FERRY_SECRET_KEY or FERRY_SECRET_KEY_PREVIOUS that is not 32 bytes
// of base64, or a previous key without a current one, stops the start
// naming the variable, before the database is touched.
func TestSecretKeyRefused(t *testing.T) {
	t.Parallel()
	good := newSecretKey(t)
	for _, tc := range []struct{ current, previous, want string }{
		{"not base64!", "", "FERRY_SECRET_KEY is not base64"},
		{base64.StdEncoding.EncodeToString([]byte("sixteen bytes!!!")), "", "FERRY_SECRET_KEY is 16 bytes, not 32"},
		{good, "short", "FERRY_SECRET_KEY_PREVIOUS is not base64"},
		{"", good, "FERRY_SECRET_KEY_PREVIOUS is set without FERRY_SECRET_KEY"},
	} {
		cfg := server.DefaultConfig()
		cfg.DatabaseURL, cfg.AdminKey, cfg.Listen = "postgres://ferry@nowhere.invalid/ferry", "an-admin-key-0123456789", "127.0.0.1:0"
		cfg.SecretKey, cfg.SecretKeyPrevious = tc.current, tc.previous
		_, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
		require.ErrorContains(t, err, tc.want)
	}
}
