package server_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// execAdmin runs each statement on the cluster's postgres database.
func execAdmin(t *testing.T, c *pgcluster.Cluster, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	for _, s := range stmts {
		_, err = admin.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	require.NoError(t, admin.Close(ctx))
}

// startCluster starts a cluster in dir/pg, logging to the test and
// stopped when it ends, with an empty database ferry.
func startCluster(t *testing.T, dir string) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{DataDir: filepath.Join(dir, "pg"), Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	execAdmin(t, c, "CREATE DATABASE ferry")
	return c
}

// sendMessages sends msgs to the queue, requires a 201 and returns the ids
// it answered.
func sendMessages(t *testing.T, env *ferrytest.Env, queue string, msgs []map[string]any) []string {
	t.Helper()
	r := env.Do("POST", "/v1/queues/"+queue+"/messages", map[string]any{"messages": msgs})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var out struct {
		Messages []struct{ ID string } `json:"messages"`
	}
	r.JSON(t, &out)
	ids := make([]string, len(out.Messages))
	for i, m := range out.Messages {
		ids[i] = m.ID
	}
	return ids
}
