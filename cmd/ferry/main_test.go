package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/store"
)

func TestServeRefusesWithoutRequiredConfig(t *testing.T) {
	for _, tc := range []struct {
		name, dbURL, key string
		want             []string
	}{
		{"nothing", "", "", []string{"FERRY_DATABASE_URL", "FERRY_ADMIN_KEY"}},
		{"no key", "postgres://127.0.0.1:1/x", "", []string{"FERRY_ADMIN_KEY"}},
		{"no database", "", "a-long-enough-admin-key", []string{"FERRY_DATABASE_URL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FERRY_DATABASE_URL", tc.dbURL)
			t.Setenv("FERRY_ADMIN_KEY", tc.key)
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"serve"}, &out, &errOut)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			if len(tc.want) == 1 {
				other := map[string]string{"FERRY_DATABASE_URL": "FERRY_ADMIN_KEY", "FERRY_ADMIN_KEY": "FERRY_DATABASE_URL"}[tc.want[0]]
				require.NotContains(t, err.Error(), other, "only the missing variable is named")
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Error(t, run(context.Background(), []string{"frobnicate"}, &out, &errOut))
	require.Contains(t, errOut.String(), "usage: ferry")
	require.Error(t, run(context.Background(), nil, &out, &errOut))
}

var baseURLRe = regexp.MustCompile(`base URL\s+(http://\S+)`)
var keyRe = regexp.MustCompile(`admin key\s+(\S+)`)

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

// FERRY_LOG_LEVEL is applied, and a value Ferry does not know stops it at
// start with the variable's name, instead of logging at some default.
func TestLogLevel(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(server.Config{LogLevel: "warn"}, &buf)
	require.NoError(t, err)
	log.Info("hidden")
	log.Warn("shown")
	require.NotContains(t, buf.String(), "hidden")
	require.Contains(t, buf.String(), "shown")

	log, err = newLogger(server.Config{LogLevel: "debug", LogFormat: "json"}, &buf)
	require.NoError(t, err)
	require.True(t, log.Enabled(context.Background(), slog.LevelDebug))

	for _, cmd := range []string{"serve", "dev", "migrate"} {
		t.Setenv("FERRY_LOG_LEVEL", "verbose")
		var out, errOut bytes.Buffer
		err = run(context.Background(), []string{cmd}, &out, &errOut)
		require.ErrorContains(t, err, "FERRY_LOG_LEVEL", cmd)
		require.ErrorContains(t, err, `"verbose"`, cmd)
	}
	t.Setenv("FERRY_LOG_LEVEL", "info")
	t.Setenv("FERRY_LOG_FORMAT", "yaml")
	err = run(context.Background(), []string{"serve"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorContains(t, err, "FERRY_LOG_FORMAT")
}

// With no FERRY_* variable set, `ferry serve` gets the defaults docs/configuration.md
// documents (server.DefaultConfig), and `ferry dev` the same but for its
// own listen address and private push; a variable that is set wins.
func TestConfigDefaults(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FERRY_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	cfg, err := loadConfig("serve")
	require.NoError(t, err)
	want := server.Config{
		Listen: ":8080", MaxBodyBytes: 262144, MaxBatch: 1000, MaxRequestBytes: 10485760,
		ShutdownTimeout: 25 * time.Second, DBMaxConns: 20, SendWorkers: 4, NotifyWindow: 10 * time.Millisecond,
		FallbackPoll: time.Second, RetentionEvery: time.Minute, LogLevel: "info", LogFormat: "text",
		PushWorkers: 100, PushDisableAfter: 120 * time.Hour, PushAttemptRetention: 72 * time.Hour, AuditRetention: 2160 * time.Hour,
		BodyReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, MetricsInterval: 5 * time.Second, DBDirectMaxConns: 5, DBTCPUserTimeout: 30 * time.Second,
		DataDir: ".ferry", Version: version,
	}
	require.Equal(t, want, cfg)
	def := server.DefaultConfig()
	def.Version = version
	require.Equal(t, def, cfg, "DefaultConfig is the empty environment's")

	dev, err := loadConfig("dev")
	require.NoError(t, err)
	want.Listen, want.AllowPrivatePush = "127.0.0.1:8080", true
	require.Equal(t, want, dev)

	t.Setenv("FERRY_ALLOW_PRIVATE_PUSH", "false")
	t.Setenv("FERRY_DATA_DIR", "/tmp/elsewhere")
	t.Setenv("FERRY_SEND_WORKERS", "7")
	dev, err = loadConfig("dev")
	require.NoError(t, err)
	require.False(t, dev.AllowPrivatePush)
	require.Equal(t, "/tmp/elsewhere", dev.DataDir)
	require.Equal(t, 7, dev.SendWorkers)
}

// Ferry reads its FERRY_* variables only: envconfig with a prefix would
// also read the unprefixed names (DATA_DIR, DATABASE_URL, LISTEN, ...),
// which other software on the machine sets, and `ferry dev` would then
// migrate someone else's database or put its cluster in their directory.
func TestOnlyFerryVariablesConfigure(t *testing.T) {
	fields := reflect.TypeFor[server.Config]()
	bare := map[string]string{}
	for i := range fields.NumField() {
		f := fields.Field(i)
		name := f.Tag.Get("envconfig")
		if name == "" {
			continue
		}
		require.True(t, strings.HasPrefix(name, "FERRY_"), "Config.%s is read from %s", f.Name, name)
		t.Setenv(name, "")
		os.Unsetenv(name)
		value := "/var/lib/someone-else"
		switch {
		case f.Type == reflect.TypeFor[time.Duration]():
			value = "7s"
		case f.Type.Kind() == reflect.Bool:
			value = "true"
		case f.Type.Kind() != reflect.String:
			value = "7"
		}
		bare[strings.TrimPrefix(name, "FERRY_")] = value
	}
	want, err := loadConfig("dev")
	require.NoError(t, err)
	for name, value := range bare {
		t.Setenv(name, value)
	}
	got, err := loadConfig("dev")
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, ".ferry", got.DataDir)
}
