package server_test

import (
	"context"
	"log/slog"
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
