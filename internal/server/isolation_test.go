package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// A database whose sessions default to REPEATABLE READ or SERIALIZABLE
// stops serve's start with an error that says how to fix it: Ferry's own
// sessions call the engine directly, whose statements must see what
// committed while they waited for a lock (an ack under an old snapshot
// leaves a message group with no head). The same database back in READ
// COMMITTED starts.
func TestStartRefusesOtherIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	setDefault := func(level string) {
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L', current_database(), '`+level+`'); END $$`)
		require.NoError(t, err)
	}
	for _, level := range []string{"repeatable read", "serializable"} {
		setDefault(level)
		cfg := server.DefaultConfig()
		cfg.DatabaseURL, cfg.AdminKey, cfg.Listen = url, "an-admin-key-0123456789", "127.0.0.1:0"
		_, err := server.New(ctx, cfg, slog.New(slog.DiscardHandler))
		require.ErrorContains(t, err, "Ferry needs READ COMMITTED", level)
		require.ErrorContains(t, err, "default_transaction_isolation = 'read committed'", level)
	}
	setDefault("read committed")
	env := ferrytest.StartOn(t, url)
	require.Equal(t, http.StatusCreated, env.Do("PUT", "/v1/queues/q", nil).Status)
}
