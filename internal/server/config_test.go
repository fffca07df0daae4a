package server_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
)

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
