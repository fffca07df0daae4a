package server_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// TestConfigCheck: Check refuses a configuration that cannot serve,
// naming the variable to set, and accepts the minimal one.
func TestConfigCheck(t *testing.T) {
	t.Parallel()
	base := server.DefaultConfig()
	base.DatabaseURL, base.AdminKey = "postgres://ferry@127.0.0.1/ferry", "an-admin-key-0123456789"
	require.NoError(t, base.Check())
	for _, tc := range []struct {
		name   string
		change func(*server.Config)
		want   []string
	}{
		{"nothing", func(c *server.Config) { c.DatabaseURL, c.AdminKey = "", "" }, []string{"FERRY_DATABASE_URL", "FERRY_ADMIN_KEY"}},
		{"no database", func(c *server.Config) { c.DatabaseURL = "" }, []string{"missing required configuration: [FERRY_DATABASE_URL]"}},
		{"no admin key", func(c *server.Config) { c.AdminKey = "" }, []string{"missing required configuration: [FERRY_ADMIN_KEY]"}},
		{"short admin key", func(c *server.Config) { c.AdminKey = "fifteen-chars-x" }, []string{"FERRY_ADMIN_KEY must be at least 16 characters"}},
		{"previous seal key alone", func(c *server.Config) { c.SecretKeyPrevious = "anything" }, []string{"FERRY_SECRET_KEY_PREVIOUS is set without FERRY_SECRET_KEY"}},
		{"bad seal key", func(c *server.Config) { c.SecretKey = "short" }, []string{"FERRY_SECRET_KEY"}},
		{"TLS cert alone", func(c *server.Config) { c.TLSCertFile = "/nonexistent/cert.pem" }, []string{"FERRY_TLS_KEY_FILE is missing"}},
	} {
		cfg := base
		tc.change(&cfg)
		err := cfg.Check()
		require.Error(t, err, tc.name)
		for _, w := range tc.want {
			require.ErrorContains(t, err, w, tc.name)
		}
	}
}

// TestServerLifecycle: a started server names its loopback URL on the
// port it listens on and serves there; Shutdown stops serving, ends the
// serve loop, and the port no longer answers.
func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.DatabaseURL, cfg.Listen, cfg.AdminKey = pgtest.NewDatabase(t), "127.0.0.1:0", ferrytest.AdminKey
	cfg.DBMaxConns, cfg.SendWorkers, cfg.LogLevel = 10, 2, "warn"
	s, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	s.Start()
	_, port, err := net.SplitHostPort(s.Addr())
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:"+port, s.URL())
	resp, err := http.Get(s.URL() + "/readyz")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode, "ready: the schema is current")
	require.NoError(t, s.Pool().Ping(context.Background()))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
	select {
	case err := <-s.Served():
		require.True(t, err == nil || errors.Is(err, http.ErrServerClosed), "%v", err)
	case <-ctx.Done():
		t.Fatal("the serve loop did not end after Shutdown")
	}
	_, err = net.DialTimeout("tcp", s.Addr(), 5*time.Second)
	require.Error(t, err, "nothing listens after Shutdown")
	require.Error(t, s.Pool().Ping(context.Background()), "the pool is closed")
}
