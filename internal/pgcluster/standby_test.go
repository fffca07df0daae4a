package pgcluster

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestStandbyFailover: a synchronous standby has every commit the primary
// acknowledged; after a kill -9 of the primary and Promote it takes writes,
// which do not wait for a standby (synchronous_standby_names, copied from
// the primary, is cleared).
func TestStandbyFailover(t *testing.T) {
	t.Parallel()

	primary := startCluster(t, Options{Durable: true, Settings: map[string]string{
		"wal_level": "replica", "max_wal_senders": "4",
	}})
	standby, err := primary.StartStandby(t.Context(), StandbyOptions{
		DataDir: filepath.Join(t.TempDir(), "standby"), Name: "ferry_standby", Logf: t.Logf,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, standby.Stop(context.Background())) })

	require.Equal(t, `"ferry_standby"`, query[string](t, primary, "SHOW synchronous_standby_names"))
	require.Equal(t, "sync", query[string](t, primary,
		"SELECT sync_state FROM pg_stat_replication WHERE application_name = 'ferry_standby'"))
	require.True(t, query[bool](t, standby, "SELECT pg_is_in_recovery()"))
	require.Equal(t, `"ferry_standby"`, query[string](t, standby, "SHOW synchronous_standby_names"),
		"the standby inherits the primary's synchronous_standby_names: the trap Promote clears")

	conn, err := pgx.Connect(t.Context(), primary.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(t.Context(), "CREATE TABLE acked AS SELECT generate_series(1, 1000) AS v")
	require.NoError(t, err)
	require.NoError(t, conn.Close(t.Context()))

	pidFile, err := os.ReadFile(filepath.Join(primary.DataDir(), "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	require.NoError(t, err)
	children := childrenOf(pid)
	require.NotEmpty(t, children, "the postmaster has children (checkpointer, walsender, ...)")
	require.NoError(t, primary.Kill())
	require.Eventually(t, func() bool {
		for _, p := range append(children, pid) {
			if ProcessAlive(p) && !zombie(p) {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "every process of the server is gone, not only the postmaster")
	require.NoError(t, primary.Stop(t.Context()), "Stop after Kill does nothing")
	_, err = pgx.Connect(t.Context(), primary.URL("postgres"))
	require.Error(t, err, "the primary is gone")

	require.NoError(t, standby.Promote(t.Context()))
	require.False(t, query[bool](t, standby, "SELECT pg_is_in_recovery()"))
	require.Equal(t, "", query[string](t, standby, "SHOW synchronous_standby_names"))
	require.Equal(t, 1000, query[int](t, standby, "SELECT count(*)::int FROM acked"),
		"every commit the primary acknowledged is on the promoted standby")
	// A commit on the new primary does not wait for a standby: it would
	// hang past the statement timeout if it did.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err = pgx.Connect(ctx, standby.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "INSERT INTO acked VALUES (1001)")
	require.NoError(t, err)
}
