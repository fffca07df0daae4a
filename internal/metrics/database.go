package metrics

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-mq/ferry/store"
)

// Database health: the gauges that tell an operator Ferry's tables are
// bloating and why (store.DBHealth), read at most once per
// dbHealthInterval by healthCollector.
var (
	dbTableBytesDesc = prometheus.NewDesc("ferry_db_table_bytes",
		"Size of a Ferry table (schema ferry, and River's river_job) on disk: heap, free space and visibility maps, TOAST.",
		[]string{"table"}, nil)
	dbIndexBytesDesc = prometheus.NewDesc("ferry_db_index_bytes", "Size of a Ferry table's indexes on disk.",
		[]string{"table"}, nil)
	dbLiveTuplesDesc = prometheus.NewDesc("ferry_db_live_tuples", "Live rows of a Ferry table, as PostgreSQL's statistics estimate them.",
		[]string{"table"}, nil)
	dbDeadTuplesDesc = prometheus.NewDesc("ferry_db_dead_tuples",
		"Dead rows of a Ferry table not yet vacuumed, as PostgreSQL's statistics estimate them (dead / (live + dead) is the bloat ratio).",
		[]string{"table"}, nil)
	dbVacuumAgeDesc = prometheus.NewDesc("ferry_db_last_vacuum_age_seconds",
		"Time since a Ferry table was last vacuumed (autovacuum or manual); absent if never since the statistics were reset.",
		[]string{"table"}, nil)
	dbXactAgeDesc = prometheus.NewDesc("ferry_db_oldest_xact_age_seconds",
		"How long the oldest open transaction of Ferry's database has been open, by holder (backend: client sessions; prepared_xact); 0 when none.",
		[]string{"holder"}, nil)
	dbXminAgeDesc = prometheus.NewDesc("ferry_db_oldest_xmin_age_transactions",
		"Age in transactions of the oldest xmin held back, by holder (backend, prepared_xact, replication_slot): rows deleted since cannot be vacuumed; 0 when none.",
		[]string{"holder"}, nil)
	healthRefreshesDesc = prometheus.NewDesc("ferry_metrics_health_refreshes_total",
		"Reads of the database health gauges (at most one a minute, or per FERRY_METRICS_INTERVAL if longer, however many scrapes).",
		nil, nil)
)

// dbHealthInterval is how long the database health gauges are reused.
// They change slowly and cost more to read than the depth gauges (the
// size of every Ferry table and index, pg_stat_activity), so a scrape
// every 15 to 30 s reads them only every other scrape or less: that, with
// the depth gauges' read per FERRY_METRICS_INTERVAL, is what scraping
// costs the idle budget. FERRY_METRICS_INTERVAL=0 reads them at every
// scrape too.
const dbHealthInterval = time.Minute

// healthCollector exposes the database health gauges, cached as
// depthCollector caches its own, with an interval of its own: the longer
// of dbHealthInterval and FERRY_METRICS_INTERVAL (0: every scrape).
type healthCollector struct {
	cachedGauges
}

func newHealthCollector(pool *pgxpool.Pool, log *slog.Logger, metricsInterval time.Duration) *healthCollector {
	h := &healthCollector{cachedGauges{pool: pool, log: log, what: "database health", read: (*gaugeRead).dbHealth,
		descs: []*prometheus.Desc{dbTableBytesDesc, dbIndexBytesDesc, dbLiveTuplesDesc, dbDeadTuplesDesc,
			dbVacuumAgeDesc, dbXactAgeDesc, dbXminAgeDesc},
		refreshed: healthRefreshesDesc}}
	if metricsInterval > 0 {
		h.interval = max(dbHealthInterval, metricsInterval)
	}
	return h
}

// dbHealth reads the database health gauges.
func (r *gaugeRead) dbHealth(ctx context.Context, pool *pgxpool.Pool) error {
	h, err := store.DBHealthRead(ctx, pool)
	if err != nil {
		return fmt.Errorf("database health: %w", err)
	}
	for _, t := range h.Tables {
		r.add(dbTableBytesDesc, float64(t.TableBytes), t.Table)
		r.add(dbIndexBytesDesc, float64(t.IndexBytes), t.Table)
		r.add(dbLiveTuplesDesc, float64(t.LiveTuples), t.Table)
		r.add(dbDeadTuplesDesc, float64(t.DeadTuples), t.Table)
		if t.SinceVacuum != nil {
			r.add(dbVacuumAgeDesc, t.SinceVacuum.Seconds(), t.Table)
		}
	}
	for holder, age := range h.OldestXactAge {
		r.add(dbXactAgeDesc, age.Seconds(), holder)
	}
	for holder, age := range h.XminAge {
		r.add(dbXminAgeDesc, float64(age), holder)
	}
	return nil
}

// poolCollector exposes a connection pool's own statistics
// (pgxpool.Stat): in-process counters, read at every scrape, costing the
// database nothing. Name is the pool label: "main" (FERRY_DATABASE_URL,
// the default) or "direct" (FERRY_DATABASE_DIRECT_URL, when it is a pool
// of its own; see Metrics.ObservePool).
type poolCollector struct {
	pool *pgxpool.Pool
	name string

	once  sync.Once
	descs poolDescs
}

// poolDescs are a poolCollector's descriptions, with its pool label.
type poolDescs struct {
	conns, total, max, acquires, waits, wait, canceled *prometheus.Desc
}

func (p *poolCollector) describe() poolDescs {
	p.once.Do(func() {
		l := prometheus.Labels{"pool": cmp.Or(p.name, "main")}
		d := func(name, help string, labels ...string) *prometheus.Desc {
			return prometheus.NewDesc(name, help, labels, l)
		}
		p.descs = poolDescs{
			conns: d("ferry_pool_connections",
				"Connections of one of Ferry's pools by state: acquired (in use), idle, constructing (being opened).", "state"),
			total: d("ferry_pool_total_connections", "Connections of one of Ferry's pools, whatever their state."),
			max: d("ferry_pool_max_connections",
				"The pool's maximum size (main: FERRY_DB_MAX_CONNS; direct: FERRY_DB_DIRECT_MAX_CONNS)."),
			acquires: d("ferry_pool_acquires_total", "Connections acquired from the pool."),
			waits: d("ferry_pool_acquire_waits_total",
				"Acquires that had to wait for a connection (none idle): a pool too small for the load."),
			wait: d("ferry_pool_acquire_wait_seconds_total",
				"Time acquires spent waiting for a connection (of ferry_pool_acquire_waits_total)."),
			canceled: d("ferry_pool_acquires_canceled_total", "Acquires given up (their request ended) before a connection came."),
		}
	})
	return p.descs
}

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	d := p.describe()
	for _, d := range []*prometheus.Desc{d.conns, d.total, d.max, d.acquires, d.waits, d.wait, d.canceled} {
		ch <- d
	}
}

func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	d := p.describe()
	s := p.pool.Stat()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(d.conns, float64(s.AcquiredConns()), "acquired")
	gauge(d.conns, float64(s.IdleConns()), "idle")
	gauge(d.conns, float64(s.ConstructingConns()), "constructing")
	gauge(d.total, float64(s.TotalConns()))
	gauge(d.max, float64(s.MaxConns()))
	counter(d.acquires, float64(s.AcquireCount()))
	counter(d.waits, float64(s.EmptyAcquireCount()))
	counter(d.wait, s.EmptyAcquireWaitTime().Seconds())
	counter(d.canceled, float64(s.CanceledAcquireCount()))
}

// ObserveNotifyIgnored exports ignored, read at every scrape, as
// ferry_notify_ignored_total: the parts of NOTIFY payloads heard on
// Ferry's channel that were no id, which another database login sent
// ([store.Notifier.Ignored]).
func (m *Metrics) ObserveNotifyIgnored(ignored func() int64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "ferry", Name: "notify_ignored_total",
		Help: "Parts of NOTIFY payloads heard on Ferry's channel that were not Ferry's (no id), ignored."},
		func() float64 { return float64(ignored()) }))
}

// ObservePool reports another of the server's pools beside the main one,
// as ferry_pool_*{pool=name}: the direct pool (FERRY_DATABASE_DIRECT_URL)
// when it is a pool of its own.
func (m *Metrics) ObservePool(name string, pool *pgxpool.Pool) {
	m.reg.MustRegister(&poolCollector{pool: pool, name: name})
}

// ObserveParked exports parked, read at every scrape, as
// ferry_long_polls_parked: the receives, event reads, group polls and
// publishes waiting for a pending SQL API event that wait now on this
// instance ([store.Notifier.Parked]).
func (m *Metrics) ObserveParked(parked func() int64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ferry", Name: "long_polls_parked",
		Help: "Long polls of this instance (receives, event reads, group polls, publishes awaiting a SQL API event's append) waiting now for something to arrive."},
		func() float64 { return float64(parked()) }))
}
