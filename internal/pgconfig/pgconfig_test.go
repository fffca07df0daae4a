package pgconfig_test

import (
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgconfig"
)

// TestBoundConnect: a connection string without connect_timeout gets
// DefaultConnectTimeout; one that sets it, in either spelling, keeps its
// value, 0 (no bound) included; so does any string when PGCONNECT_TIMEOUT
// is set.
func TestBoundConnect(t *testing.T) {
	t.Setenv("PGCONNECT_TIMEOUT", "") // restored at the end
	require.NoError(t, os.Unsetenv("PGCONNECT_TIMEOUT"))
	for _, tc := range []struct {
		conn string
		want time.Duration
	}{
		{"postgres://ferry@127.0.0.1/ferry", pgconfig.DefaultConnectTimeout},
		{"postgresql://ferry@127.0.0.1/ferry?sslmode=disable", pgconfig.DefaultConnectTimeout},
		{"postgres://ferry@127.0.0.1/ferry?connect_timeout=0", 0},
		{"postgres://ferry@127.0.0.1/ferry?connect_timeout=2", 2 * time.Second},
		{"host=127.0.0.1 user=ferry", pgconfig.DefaultConnectTimeout},
		{"host=127.0.0.1 connect_timeout=0", 0},
		{"host=127.0.0.1 connect_timeout = 3", 3 * time.Second},
		{"host=127.0.0.1 application_name=my_connect_timeout", pgconfig.DefaultConnectTimeout},
	} {
		c, err := pgconn.ParseConfig(tc.conn)
		require.NoError(t, err, tc.conn)
		pgconfig.BoundConnect(c, tc.conn)
		require.Equal(t, tc.want, c.ConnectTimeout, tc.conn)
	}

	t.Setenv("PGCONNECT_TIMEOUT", "0")
	const conn = "postgres://ferry@127.0.0.1/ferry"
	c, err := pgconn.ParseConfig(conn)
	require.NoError(t, err)
	pgconfig.BoundConnect(c, conn)
	require.Zero(t, c.ConnectTimeout, "PGCONNECT_TIMEOUT=0 is an explicit choice")
}
