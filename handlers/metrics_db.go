package handlers

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-mq/ferry/store"
)

// Database health: the gauges that tell an operator Ferry's tables are
// bloating and why (store.DBHealth), read with the other database-derived
// gauges (once per FERRY_METRICS_INTERVAL, see depthCollector).
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
)

func describeDBHealth(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dbTableBytesDesc, dbIndexBytesDesc, dbLiveTuplesDesc, dbDeadTuplesDesc,
		dbVacuumAgeDesc, dbXactAgeDesc, dbXminAgeDesc} {
		ch <- d
	}
}

// dbHealth is the gaugeRead step of the database health gauges.
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

// poolCollector exposes the connection pool's own statistics
// (pgxpool.Stat): in-process counters, read at every scrape, costing the
// database nothing.
type poolCollector struct {
	pool *pgxpool.Pool
}

var (
	poolConnsDesc = prometheus.NewDesc("ferry_pool_connections",
		"Connections of Ferry's pool by state: acquired (in use), idle, constructing (being opened).",
		[]string{"state"}, nil)
	poolTotalDesc    = prometheus.NewDesc("ferry_pool_total_connections", "Connections of Ferry's pool, whatever their state.", nil, nil)
	poolMaxDesc      = prometheus.NewDesc("ferry_pool_max_connections", "The pool's maximum size (FERRY_DB_MAX_CONNS).", nil, nil)
	poolAcquiresDesc = prometheus.NewDesc("ferry_pool_acquires_total", "Connections acquired from the pool.", nil, nil)
	poolWaitsDesc    = prometheus.NewDesc("ferry_pool_acquire_waits_total",
		"Acquires that had to wait for a connection (none idle): a pool too small for the load.", nil, nil)
	poolWaitDesc = prometheus.NewDesc("ferry_pool_acquire_wait_seconds_total",
		"Time acquires spent waiting for a connection (of ferry_pool_acquire_waits_total).", nil, nil)
	poolCanceledDesc = prometheus.NewDesc("ferry_pool_acquires_canceled_total",
		"Acquires given up (their request ended) before a connection came.", nil, nil)
)

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolConnsDesc, poolTotalDesc, poolMaxDesc, poolAcquiresDesc, poolWaitsDesc, poolWaitDesc, poolCanceledDesc} {
		ch <- d
	}
}

func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := p.pool.Stat()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(poolConnsDesc, float64(s.AcquiredConns()), "acquired")
	gauge(poolConnsDesc, float64(s.IdleConns()), "idle")
	gauge(poolConnsDesc, float64(s.ConstructingConns()), "constructing")
	gauge(poolTotalDesc, float64(s.TotalConns()))
	gauge(poolMaxDesc, float64(s.MaxConns()))
	counter(poolAcquiresDesc, float64(s.AcquireCount()))
	counter(poolWaitsDesc, float64(s.EmptyAcquireCount()))
	counter(poolWaitDesc, s.EmptyAcquireWaitTime().Seconds())
	counter(poolCanceledDesc, float64(s.CanceledAcquireCount()))
}
