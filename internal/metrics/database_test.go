package metrics

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The database health gauges are reused for a minute, or for
// FERRY_METRICS_INTERVAL when that is longer; an interval of 0 reads them
// at every scrape.
func TestHealthCollectorInterval(t *testing.T) {
	t.Parallel()
	for metricsInterval, want := range map[time.Duration]time.Duration{
		0:               0,
		5 * time.Second: dbHealthInterval,
		2 * time.Minute: 2 * time.Minute,
	} {
		require.Equal(t, want, newHealthCollector(nil, slog.Default(), metricsInterval).interval, "FERRY_METRICS_INTERVAL=%s", metricsInterval)
	}
}

// A pool's statistics are exported under its pool label ("main" when it
// has no name), read from the pool itself: nothing is asked of the
// database (the pool here never connects).
func TestPoolCollector(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?pool_max_conns=7")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	for name, label := range map[string]string{"": "main", "direct": "direct"} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(&poolCollector{pool: pool, name: name})
		families, err := reg.Gather()
		require.NoError(t, err)
		got := map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				require.Equal(t, "pool", m.GetLabel()[0].GetName())
				require.Equal(t, label, m.GetLabel()[0].GetValue())
				got[f.GetName()] += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
		require.Equal(t, map[string]float64{
			"ferry_pool_connections": 0, "ferry_pool_total_connections": 0, "ferry_pool_max_connections": 7,
			"ferry_pool_acquires_total": 0, "ferry_pool_acquire_waits_total": 0,
			"ferry_pool_acquire_wait_seconds_total": 0, "ferry_pool_acquires_canceled_total": 0,
		}, got, "pool %q", label)
	}
}
