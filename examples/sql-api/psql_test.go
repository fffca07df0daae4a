// Package sqlapi_test runs the SQL API's psql scripts (the *.sql files
// beside it) against a running Ferry, as an application's operator would:
// psql on Ferry's database, each script's checks as ASSERTs and \if.
package sqlapi_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// psql runs script against env's database with the given variables and
// returns its output; it fails the test if psql exits non-zero (a failed
// check stops the script: ON_ERROR_STOP).
func psql(t *testing.T, env *ferrytest.Env, script string, vars ...string) string {
	t.Helper()
	dir, err := pgcluster.BinDir()
	require.NoError(t, err)
	args := []string{"--no-psqlrc", "-X", "-v", "ON_ERROR_STOP=1", "-d", env.DatabaseURL, "-f", script}
	for _, v := range vars {
		args = append(args, "-v", v)
	}
	out, err := exec.Command(filepath.Join(dir, "psql"), args...).CombinedOutput()
	require.NoError(t, err, "psql -f %s:\n%s", script, out)
	return string(out)
}

// api is package client for env's server.
func api(t *testing.T, env *ferrytest.Env) *client.Client {
	t.Helper()
	return client.New(env.URL, ferrytest.AdminKey, client.WithHTTPClient(env.Client))
}

func TestProducerScript(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	c, ctx := api(t, env), t.Context()
	_, _, err := c.PutQueue(ctx, "jobs", client.QueueConfig{})
	require.NoError(t, err)
	_, _, err = c.PutTopic(ctx, "orders", client.TopicConfig{Partitions: client.Ptr(4)})
	require.NoError(t, err)
	out := psql(t, env, "producer.sql", "queue=jobs", "topic=orders")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "producer.sql: ok"), out)
}

func TestConsumerScript(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	_, _, err := api(t, env).PutQueue(t.Context(), "work", client.QueueConfig{})
	require.NoError(t, err)
	out := psql(t, env, "consumer.sql", "queue=work")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "consumer.sql: ok"), out)
}

func TestErrorsScript(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	c, ctx := api(t, env), t.Context()
	_, _, err := c.PutQueue(ctx, "small", client.QueueConfig{MaxDepth: client.Ptr[int64](2)})
	require.NoError(t, err)
	_, _, err = c.PutTopic(ctx, "events", client.TopicConfig{})
	require.NoError(t, err)
	_, _, err = c.PutSubscription(ctx, "events", "audit", client.SubscriptionConfig{})
	require.NoError(t, err)
	out := psql(t, env, "errors.sql", "queue=small", "topic=events", "sub=audit")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "errors.sql: ok"), out)
}
