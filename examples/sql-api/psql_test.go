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

func put(t *testing.T, env *ferrytest.Env, path, body string) {
	t.Helper()
	r := env.Do("PUT", path, body)
	require.Contains(t, []int{200, 201}, r.Status, "PUT %s: %s", path, r.Body)
}

func TestProducerScript(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	put(t, env, "/v1/queues/jobs", `{}`)
	put(t, env, "/v1/topics/orders", `{"partitions": 4}`)
	out := psql(t, env, "producer.sql", "queue=jobs", "topic=orders")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "producer.sql: ok"), out)
}

func TestConsumerScript(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	put(t, env, "/v1/queues/work", `{}`)
	out := psql(t, env, "consumer.sql", "queue=work")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "consumer.sql: ok"), out)
}

func TestErrorsScript(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	put(t, env, "/v1/queues/small", `{"max_depth": 2}`)
	put(t, env, "/v1/topics/events", `{}`)
	put(t, env, "/v1/topics/events/subscriptions/audit", `{}`)
	out := psql(t, env, "errors.sql", "queue=small", "topic=events", "sub=audit")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "errors.sql: ok"), out)
}
