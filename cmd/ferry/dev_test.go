package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/store"
)

// runDev starts `ferry dev` on dataDir, waits until it prints its URL,
// checks that it serves, and returns the admin key. Cancelling stops it.
func runDev(t *testing.T, dataDir string) (key string) {
	t.Setenv("FERRY_DATA_DIR", dataDir)
	t.Setenv("FERRY_LISTEN", "127.0.0.1:0")
	t.Setenv("FERRY_DATABASE_URL", "")
	t.Setenv("FERRY_ADMIN_KEY", "")
	t.Setenv("FERRY_SECRET_KEY", "")
	t.Setenv("FERRY_LOG_LEVEL", "warn")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut ferrytest.LogBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"dev"}, &out, &errOut) }()

	var base string
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			t.Fatalf("ferry dev exited early: %v\n%s", err, errOut.String())
		default:
		}
		m := baseURLRe.FindStringSubmatch(out.String())
		if m == nil {
			return false
		}
		base = m[1]
		return true
	}, 60*time.Second, 20*time.Millisecond, "ferry dev never printed its URL; stderr:\n%s", errOut.String())
	key = keyRe.FindStringSubmatch(out.String())[1]
	require.Contains(t, out.String(), "curl", "prints a curl example")

	req, _ := http.NewRequest("PUT", base+"/v1/queues/dev-check", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Contains(t, []int{200, 201}, resp.StatusCode)
	require.Contains(t, out.String(), base+"/ui/", "prints the console's URL")
	resp, err = http.Get(base + "/ui/login")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "ferry dev serves the console")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "Ctrl-C stops ferry dev cleanly")
	case <-time.After(30 * time.Second):
		t.Fatal("ferry dev did not stop")
	}
	_, err = http.Get(base + "/healthz")
	require.Error(t, err, "the server is gone after the stop")
	return key
}

func TestDevStartsPrivatePostgresAndReusesIt(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "ferry-data")
	key1 := runDev(t, dataDir)
	require.FileExists(t, filepath.Join(dataDir, "pg", "PG_VERSION"))
	stored, err := os.ReadFile(filepath.Join(dataDir, "admin-key"))
	require.NoError(t, err)
	require.Equal(t, key1, strings.TrimSpace(string(stored)))

	secretKey, err := os.ReadFile(filepath.Join(dataDir, "secret-key"))
	require.NoError(t, err, "a server key is made, so that keys work over SQS")
	_, err = store.ParseKeySealKey(string(secretKey))
	require.NoError(t, err)

	key2 := runDev(t, dataDir)
	require.Equal(t, key1, key2, "the second run reuses the data directory and its key")
	again, err := os.ReadFile(filepath.Join(dataDir, "secret-key"))
	require.NoError(t, err)
	require.Equal(t, secretKey, again, "and its server key")
}

// A server key file that holds no valid key stops `ferry dev` naming the
// file, and is left as it is: replacing it would lose every seal.
func TestDevSecretKeyFileRefused(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	path := filepath.Join(dataDir, "secret-key")
	require.NoError(t, os.WriteFile(path, []byte("not a key\n"), 0o600))
	_, err := devSecretKey(dataDir)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "openssl rand -base64 32")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "not a key\n", string(b))
}

// `ferry dev` serves this machine only unless FERRY_LISTEN says otherwise:
// its database trusts local connections and its key is on the console.
func TestDevListensOnLoopbackByDefault(t *testing.T) {
	t.Setenv("FERRY_LISTEN", "")
	os.Unsetenv("FERRY_LISTEN")
	cfg, err := loadConfig("dev")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", cfg.Listen)

	t.Setenv("FERRY_LISTEN", "0.0.0.0:9000")
	cfg, err = loadConfig("dev")
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0:9000", cfg.Listen, "FERRY_LISTEN wins")
}
