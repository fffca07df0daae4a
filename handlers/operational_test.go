package handlers_test

import (
	"context"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/openapi"
)

func TestHealthAndReadyNeedNoKey(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	for _, h := range []http.Header{{}, {"Authorization": {"Bearer wrong"}}} {
		r := env.DoWith("GET", "/healthz", nil, h)
		require.Equal(t, http.StatusOK, r.Status)
		require.JSONEq(t, `{"status":"ok"}`, string(r.Body))
		r = env.DoWith("GET", "/readyz", nil, h)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		require.JSONEq(t, `{"status":"ready"}`, string(r.Body))
	}
}

// dbName is the database name in a postgres:// URL.
func dbName(t testing.TB, dbURL string) string {
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return strings.TrimPrefix(u.Path, "/")
}

func adminExec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.AdminURL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	require.NoError(t, err, "%s", sql)
}

// TestReadyzDatabaseUnreachable cuts the server off its database (no new
// connections allowed, existing ones terminated): /readyz must say 503
// while /healthz stays 200, and readiness must come back with the database.
func TestReadyzDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	require.Equal(t, http.StatusOK, env.Do("GET", "/readyz", nil).Status)

	name := pgx.Identifier{dbName(t, env.DatabaseURL)}.Sanitize()
	adminExec(t, "ALTER DATABASE "+name+" WITH ALLOW_CONNECTIONS false")
	restored := false
	restore := func() {
		if !restored {
			restored = true
			adminExec(t, "ALTER DATABASE "+name+" WITH ALLOW_CONNECTIONS true")
		}
	}
	t.Cleanup(restore)
	adminExec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
		dbName(t, env.DatabaseURL))

	var r ferrytest.Response
	require.Eventually(t, func() bool {
		r = env.Do("GET", "/readyz", nil)
		return r.Status == http.StatusServiceUnavailable
	}, 10*time.Second, 100*time.Millisecond, "readyz while the database is unreachable: %d %s", r.Status, r.Body)
	p := requireProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	require.NotContains(t, p["detail"], "ALLOW_CONNECTIONS", "no internals in the detail")
	r = env.Do("GET", "/healthz", nil)
	require.Equal(t, http.StatusOK, r.Status, "liveness does not depend on the database")

	restore()
	require.Eventually(t, func() bool {
		return env.Do("GET", "/readyz", nil).Status == http.StatusOK
	}, 15*time.Second, 100*time.Millisecond, "ready again once the database is back")
	// And the API works again.
	putQueue(t, env, "after-outage", nil)
	send(t, env, "after-outage", msg(1))
	require.Len(t, receive(t, env, "after-outage", nil), 1)
}

// TestReadyzSchemaNotCurrent marks the schema dirty (a half-applied
// migration): /readyz must say 503 until it is clean again.
func TestReadyzSchemaNotCurrent(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	ctx := context.Background()
	conn := dbConn(t, env.DatabaseURL)

	_, err := conn.Exec(ctx, `UPDATE ferry_schema_migrations SET dirty = true`)
	require.NoError(t, err)
	requireProblem(t, env.Do("GET", "/readyz", nil), http.StatusServiceUnavailable, "unavailable")
	_, err = conn.Exec(ctx, `UPDATE ferry_schema_migrations SET dirty = false, version = version - 1`)
	require.NoError(t, err)
	requireProblem(t, env.Do("GET", "/readyz", nil), http.StatusServiceUnavailable, "unavailable")
	_, err = conn.Exec(ctx, `UPDATE ferry_schema_migrations SET version = version + 1`)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, env.Do("GET", "/readyz", nil).Status)
}

// metrics scrapes /metrics (no key) and returns samples by series, e.g.
// `ferry_messages_sent_total{queue="m"}` → 3 (labels as exposed).
func metrics(t testing.TB, env *ferrytest.Env) (map[string]float64, string) {
	t.Helper()
	r := env.DoWith("GET", "/metrics", nil, http.Header{})
	require.Equal(t, http.StatusOK, r.Status)
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "text/plain", mt)
	out := map[string]float64{}
	for _, line := range strings.Split(string(r.Body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "sample line %q", line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, "sample line %q", line)
		out[line[:i]] = v
	}
	return out, string(r.Body)
}

// ferry_long_polls_parked counts the long polls waiting on the instance:
// one while a receive waits, none once a send has answered it.
func TestMetricsLongPollsParked(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "lp", nil)
	m, text := metrics(t, env)
	require.Contains(t, text, "# TYPE ferry_long_polls_parked gauge")
	require.Equal(t, 0.0, m["ferry_long_polls_parked"])
	done := startParked(t, env, func() asyncResult {
		return doAsync(env, "POST", qpath("lp", "/receive"), map[string]any{"wait_seconds": 10})
	})
	m, _ = metrics(t, env)
	require.Equal(t, 1.0, m["ferry_long_polls_parked"])
	sent := send(t, env, "lp", msg("wake"))
	got, err := decodeReceived(<-done)
	require.NoError(t, err)
	require.Equal(t, []string{sent[0].ID}, msgIDs(got))
	m, _ = metrics(t, env)
	require.Equal(t, 0.0, m["ferry_long_polls_parked"])
}

// ferry_notify_ignored_total counts the parts of NOTIFY payloads on
// Ferry's channel that no Ferry instance wrote (no id), which any
// database login can send: they are ignored, and counted.
func TestMetricsNotifyIgnored(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	m, text := metrics(t, env)
	require.Contains(t, text, "# TYPE ferry_notify_ignored_total counter")
	require.Equal(t, 0.0, m["ferry_notify_ignored_total"])
	conn := dbConn(t, env.DatabaseURL)
	for _, payload := range []string{"", "x", "1,,junk", "99999999999999999999"} {
		_, err := conn.Exec(context.Background(), `SELECT pg_notify('ferry_messages', $1)`, payload)
		require.NoError(t, err)
	}
	ferrytest.WaitFor(t, 10*time.Second, "the forged payloads to be counted", func() bool {
		m, _ = metrics(t, env)
		return m["ferry_notify_ignored_total"] >= 5
	})
	require.Equal(t, 5.0, m["ferry_notify_ignored_total"], "one per part that is no id")
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "mq", nil)

	m, text := metrics(t, env)
	require.Contains(t, text, "# TYPE ferry_queue_messages gauge")
	require.Contains(t, text, "# TYPE ferry_http_request_duration_seconds histogram")
	require.Equal(t, 0.0, m[`ferry_queue_messages{queue="mq",state="available"}`])
	require.Contains(t, m, `ferry_queue_messages{queue="mq",state="available"}`)
	for _, state := range []string{"in_flight", "delayed", "dead_letters"} {
		require.Contains(t, m, `ferry_queue_messages{queue="mq",state="`+state+`"}`)
	}
	sent0 := m[`ferry_messages_sent_total{queue="mq"}`]
	sends0 := m[`ferry_http_request_duration_seconds_count{method="POST",route="/v1/queues/:queue/messages",status="201"}`]

	send(t, env, "mq", msg(1), msg(2), msg(3), msg("later", "delay_seconds", 600))
	send(t, env, "mq", msg("dup", "dedup_id", "x"))
	send(t, env, "mq", msg("dup", "dedup_id", "x")) // a duplicate is not counted
	got := receive(t, env, "mq", map[string]any{"max_messages": 2})
	ack(t, env, "mq", receipts(got)...)
	one := receive(t, env, "mq", nil)
	settle(t, env, "mq", "nack", map[string]any{"receipts": receipts(one), "dead_letter": true})

	m, _ = metrics(t, env)
	require.Equal(t, sent0+5, m[`ferry_messages_sent_total{queue="mq"}`])
	require.Equal(t, 3.0, m[`ferry_messages_received_total{queue="mq"}`])
	require.Equal(t, 2.0, m[`ferry_messages_acked_total{queue="mq"}`])
	require.Equal(t, 1.0, m[`ferry_messages_dead_lettered_total{queue="mq"}`])
	require.Equal(t, 1.0, m[`ferry_queue_messages{queue="mq",state="available"}`])
	require.Equal(t, 1.0, m[`ferry_queue_messages{queue="mq",state="delayed"}`])
	require.Equal(t, 0.0, m[`ferry_queue_messages{queue="mq",state="in_flight"}`])
	require.Equal(t, 1.0, m[`ferry_queue_messages{queue="mq",state="dead_letters"}`])
	require.Equal(t, sends0+3,
		m[`ferry_http_request_duration_seconds_count{method="POST",route="/v1/queues/:queue/messages",status="201"}`])
	require.GreaterOrEqual(t,
		m[`ferry_http_request_duration_seconds_count{method="POST",route="/v1/queues/:queue/receive",status="200"}`], 2.0)
	require.Contains(t, m, `ferry_http_request_duration_seconds_bucket{method="POST",route="/v1/queues/:queue/ack",status="200",le="+Inf"}`)
	require.Contains(t, m, `ferry_queue_oldest_age_seconds{queue="mq"}`)
}

// TestMetricsDatabaseHealth: /metrics carries the database health gauges
// of Ferry's tables and River's job table, the oldest transaction and
// xmin ages, and the pool's statistics, with plausible values; a
// transaction left open shows as at least as old as it is.
func TestMetricsDatabaseHealth(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "hq", nil)
	send(t, env, "hq", msg(1), msg(2))

	// A transaction left open on Ferry's database, a second old before the
	// first scrape (which reads the health gauges for the next minute).
	ctx := context.Background()
	conn := dbConn(t, env.DatabaseURL)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
	opened := time.Now()
	require.Eventually(t, func() bool {
		var old bool
		require.NoError(t, tx.QueryRow(ctx, `SELECT clock_timestamp() - now() >= interval '1 second'`).Scan(&old))
		return old
	}, 30*time.Second, 50*time.Millisecond, "the transaction is a second old")

	m, text := metrics(t, env)
	for _, table := range []string{"ferry.messages", "ferry.queues", "ferry.events", "public.river_job"} {
		require.Positive(t, m[`ferry_db_table_bytes{table="`+table+`"}`]+m[`ferry_db_index_bytes{table="`+table+`"}`], table)
		require.Positive(t, m[`ferry_db_index_bytes{table="`+table+`"}`], "%s has indexes", table)
		require.Contains(t, m, `ferry_db_live_tuples{table="`+table+`"}`)
		require.Contains(t, m, `ferry_db_dead_tuples{table="`+table+`"}`)
	}
	require.Contains(t, text, "# TYPE ferry_db_dead_tuples gauge")
	for _, holder := range []string{"backend", "prepared_xact"} {
		require.Contains(t, m, `ferry_db_oldest_xact_age_seconds{holder="`+holder+`"}`)
	}
	for _, holder := range []string{"backend", "prepared_xact", "replication_slot"} {
		require.GreaterOrEqual(t, m[`ferry_db_oldest_xmin_age_transactions{holder="`+holder+`"}`], 0.0)
		require.Contains(t, m, `ferry_db_oldest_xmin_age_transactions{holder="`+holder+`"}`)
	}

	// The pool: its size as configured, connections in use by now.
	require.Equal(t, float64(env.Config.DBMaxConns), m[`ferry_pool_max_connections{pool="main"}`])
	total := m[`ferry_pool_total_connections{pool="main"}`]
	require.GreaterOrEqual(t, total, 1.0)
	require.LessOrEqual(t, total, float64(env.Config.DBMaxConns))
	require.Equal(t, total, m[`ferry_pool_connections{pool="main",state="acquired"}`]+m[`ferry_pool_connections{pool="main",state="idle"}`]+
		m[`ferry_pool_connections{pool="main",state="constructing"}`])
	require.Positive(t, m[`ferry_pool_acquires_total{pool="main"}`])
	require.Contains(t, m, `ferry_pool_acquire_waits_total{pool="main"}`)
	require.Contains(t, m, `ferry_pool_acquire_wait_seconds_total{pool="main"}`)
	require.Contains(t, text, "# TYPE ferry_pool_acquires_total counter")

	age := m[`ferry_db_oldest_xact_age_seconds{holder="backend"}`]
	require.GreaterOrEqual(t, age, 1.0, "an open transaction's age")
	t.Logf("transaction open for %v: gauge %.3f s", time.Since(opened), age)
	require.LessOrEqual(t, age, time.Since(opened).Seconds()+1, "no older than it is (plus the clock's grain)")
}

// TestMetricsDirectPool: with FERRY_DATABASE_DIRECT_URL, the direct pool
// (River, the notifier's LISTEN, seeks) is reported beside the main one,
// told apart by the pool label, each with its own size.
func TestMetricsDirectPool(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	env := ferrytest.StartOn(t, db, func(c *server.Config) {
		c.DatabaseDirectURL = db
		c.DBDirectMaxConns = 3
	})
	require.Eventually(t, func() bool {
		m, _ := metrics(t, env)
		return m[`ferry_pool_total_connections{pool="direct"}`] >= 1 // River's LISTEN, at least
	}, 30*time.Second, 50*time.Millisecond, "the direct pool's connections")
	m, _ := metrics(t, env)
	require.Equal(t, float64(env.Config.DBMaxConns), m[`ferry_pool_max_connections{pool="main"}`])
	require.Equal(t, 3.0, m[`ferry_pool_max_connections{pool="direct"}`])
	require.Contains(t, m, `ferry_pool_connections{pool="direct",state="acquired"}`)
	require.Contains(t, m, `ferry_pool_acquires_total{pool="direct"}`)
}

// TestMetricsHealthInterval: the database health gauges are read at most
// once per minute (or per FERRY_METRICS_INTERVAL, if longer), however
// often the depth gauges are read: a scrape every 15 s must not cost the
// sizes of every table each time.
func TestMetricsHealthInterval(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.MetricsInterval = 20 * time.Millisecond })
	require.Eventually(t, func() bool {
		m, _ := metrics(t, env)
		return m[`ferry_metrics_refreshes_total`] >= 3
	}, 30*time.Second, 30*time.Millisecond, "the depth gauges are read again")
	m, _ := metrics(t, env)
	require.Equal(t, 1.0, m[`ferry_metrics_health_refreshes_total`], "one health read")
	require.Positive(t, m[`ferry_db_table_bytes{table="ferry.queues"}`], "the health gauges are there")
}

func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	r := env.DoWith("GET", "/openapi.yaml", nil, http.Header{})
	require.Equal(t, http.StatusOK, r.Status)
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "application/yaml", mt)
	require.Equal(t, openapi.Spec(), r.Body, "serves the project's openapi.yaml as is")

	doc, err := openapi3.NewLoader().LoadFromData(r.Body)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()))
	for path, methods := range map[string][]string{
		"/v1/queues":                              {"GET"},
		"/v1/queues/{queue}":                      {"PUT", "GET", "DELETE"},
		"/v1/queues/{queue}/messages":             {"POST", "DELETE"},
		"/v1/queues/{queue}/receive":              {"POST"},
		"/v1/queues/{queue}/ack":                  {"POST"},
		"/v1/queues/{queue}/nack":                 {"POST"},
		"/v1/queues/{queue}/extend":               {"POST"},
		"/v1/queues/{queue}/dead-letters":         {"GET", "DELETE"},
		"/v1/queues/{queue}/dead-letters/redrive": {"POST"},
		"/healthz":      {"GET"},
		"/readyz":       {"GET"},
		"/metrics":      {"GET"},
		"/openapi.yaml": {"GET"},
	} {
		item := doc.Paths.Find(path)
		require.NotNil(t, item, "path %s", path)
		for _, m := range methods {
			require.NotNil(t, item.GetOperation(m), "%s %s", m, path)
		}
	}
}

// With FERRY_METRICS_KEY set, /metrics answers only that key as a Bearer
// token: no key, a wrong key and the admin key are 401 problems; the
// other operational routes stay open. Without it /metrics is open (every
// other metrics test scrapes with no key).
func TestMetricsKey(t *testing.T) {
	t.Parallel()
	const key = "metrics-scraper-key-0123"
	env := ferrytest.Start(t, func(c *server.Config) { c.MetricsKey = key })

	for _, tc := range []struct {
		name, authorization string
	}{
		{"no key", ""},
		{"not bearer", "Basic " + key},
		{"empty bearer", "Bearer "},
		{"wrong key", "Bearer " + key + "x"},
		{"prefix of the key", "Bearer " + key[:len(key)-1]},
		{"admin key", "Bearer " + ferrytest.AdminKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := forTest(env, t)
			header := http.Header{}
			if tc.authorization != "" {
				header.Set("Authorization", tc.authorization)
			}
			r := e.DoWith("GET", "/metrics", nil, header)
			requireProblem(t, r, http.StatusUnauthorized, "unauthorized")
			require.Contains(t, r.Header.Get("WWW-Authenticate"), "Bearer")
			require.NotContains(t, string(r.Body), "ferry_", "no metrics in the refusal")
		})
	}

	r := env.DoWith("GET", "/metrics", nil, http.Header{"Authorization": {"Bearer " + key}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), "ferry_http_request_duration_seconds")
	r = env.DoWith("GET", "/metrics", nil, http.Header{"Authorization": {"bearer " + key}})
	require.Equal(t, http.StatusOK, r.Status, "the scheme is case-insensitive, as for API keys")
	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml"} {
		require.Equal(t, http.StatusOK, env.DoWith("GET", path, nil, http.Header{}).Status, path)
	}
}
