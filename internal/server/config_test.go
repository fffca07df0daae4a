package server_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
)

// A FERRY_DB_TCP_USER_TIMEOUT that means nothing useful stops the start,
// naming the variable, before the database is touched (the URL here
// names no host that could answer).
func TestDBTCPUserTimeoutRefused(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{-time.Second, time.Millisecond, 999 * time.Millisecond, 24*time.Hour + time.Millisecond} {
		cfg := server.DefaultConfig()
		cfg.DatabaseURL, cfg.AdminKey, cfg.Listen = "postgres://ferry@nowhere.invalid/ferry", "an-admin-key-0123456789", "127.0.0.1:0"
		cfg.DBTCPUserTimeout = d
		_, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
		require.ErrorContains(t, err, "FERRY_DB_TCP_USER_TIMEOUT", "%s", d)
		require.ErrorContains(t, err, "0 (off) or from 1s to 24h", "%s", d)
		require.ErrorContains(t, err, d.String(), "the value given")
	}
}

// FERRY_DB_TCP_USER_TIMEOUT is a Go duration, 30s when unset; one that
// does not parse stops the start naming the variable.
func TestDBTCPUserTimeoutFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
	}{{"", 30 * time.Second}, {"0", 0}, {"1s", time.Second}, {"2m", 2 * time.Minute}, {"24h", 24 * time.Hour}} {
		t.Setenv("FERRY_DB_TCP_USER_TIMEOUT", tc.env) // restored at the end
		if tc.env == "" {
			require.NoError(t, os.Unsetenv("FERRY_DB_TCP_USER_TIMEOUT"))
		}
		cfg, err := server.LoadConfig(false)
		require.NoError(t, err, "%q", tc.env)
		require.Equal(t, tc.want, cfg.DBTCPUserTimeout, "%q", tc.env)
		cfg.DatabaseURL, cfg.AdminKey = "postgres://db/ferry", "an-admin-key-0123456789"
		require.NoError(t, cfg.Check(), "%q", tc.env)
	}
	for _, bad := range []string{"30", "abc", "-"} {
		t.Setenv("FERRY_DB_TCP_USER_TIMEOUT", bad)
		_, err := server.LoadConfig(false)
		require.ErrorContains(t, err, "FERRY_DB_TCP_USER_TIMEOUT", "%q", bad)
	}
}
