package handlers

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ferry-mq/ferry/store"
)

// Metrics holds Ferry's Prometheus metrics, on a registry of its own (so
// that several servers can live in one test process).
type Metrics struct {
	reg          *prometheus.Registry
	httpDuration *prometheus.HistogramVec
	sent         *prometheus.CounterVec
	received     *prometheus.CounterVec
	acked        *prometheus.CounterVec
	nacked       *prometheus.CounterVec
	deadLettered *prometheus.CounterVec
	published    *prometheus.CounterVec
	pushAttempts *prometheus.CounterVec
	pushLatency  prometheus.Histogram
	// Consumer groups.
	rebalances     *prometheus.CounterVec
	evictions      *prometheus.CounterVec
	fencedCommits  *prometheus.CounterVec
	expiredSkipped *prometheus.CounterVec
	// Retention.
	expired *prometheus.CounterVec
	// auditErrors counts audit log entries that could not be written.
	auditErrors prometheus.Counter
	// authFailures counts requests refused for their API key, by reason.
	authFailures *prometheus.CounterVec
}

// The reasons of ferry_auth_failures_total.
const (
	authMissing   = "missing"   // no Authorization: Bearer header, or an ill-formed one (401)
	authInvalid   = "invalid"   // an unknown, revoked or expired key (401)
	authForbidden = "forbidden" // a valid key without the permission (403)
)

// NewMetrics registers the metrics. Queue depth and age, offsets and lags
// are read from the database at scrape time, at most once per interval (0:
// at every scrape, one scrape at a time); see depthCollector.
func NewMetrics(pool *pgxpool.Pool, log *slog.Logger, interval time.Duration) *Metrics {
	reg := prometheus.NewRegistry()
	counter := func(name, help string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ferry", Name: name, Help: help}, []string{"queue"})
		reg.MustRegister(c)
		return c
	}
	m := &Metrics{
		reg: reg,
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "ferry", Name: "http_request_duration_seconds",
			Help:    "HTTP request duration by method, route and status.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 25},
		}, []string{"method", "route", "status"}),
		sent:         counter("messages_sent_total", "Messages enqueued (duplicates excluded)."),
		received:     counter("messages_received_total", "Messages handed to consumers (each receive counts)."),
		acked:        counter("messages_acked_total", "Messages acknowledged."),
		nacked:       counter("messages_nacked_total", "Messages released by nack."),
		deadLettered: counter("messages_dead_lettered_total", "Messages moved to the dead letters."),
		published: func() *prometheus.CounterVec {
			c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ferry", Name: "events_published_total",
				Help: "Events appended to a topic (duplicates excluded), by REST publishes and by the relay of SQL API publishes."}, []string{"topic"})
			reg.MustRegister(c)
			return c
		}(),
	}
	m.pushAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ferry", Name: "push_attempts_total",
		Help: "Push delivery attempts by outcome: ok (2xx), failed, gone (410)."}, []string{"outcome"})
	m.pushLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "ferry", Name: "push_delivery_latency_seconds",
		Help:    "Time from a message's send (an event's publish) to its successful push delivery.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600},
	})
	groupCounter := func(name, help string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ferry", Name: name, Help: help}, []string{"topic", "group"})
		reg.MustRegister(c)
		return c
	}
	m.rebalances = groupCounter("consumer_group_rebalances_total", "Changes of a consumer group's assignment.")
	m.evictions = groupCounter("consumer_group_evictions_total", "Members evicted after their session timed out.")
	m.fencedCommits = groupCounter("consumer_group_fenced_commits_total",
		"Commits refused because the consumer no longer owned a partition in the generation it named.")
	m.expiredSkipped = groupCounter("consumer_group_expired_skipped_total",
		"Events a group never read because retention removed them first (its position was moved to the oldest retained event).")
	// One label set for queues and subscriptions: a queue's series have
	// topic and subscription empty, a subscription's have queue empty, so
	// ferry_expired_total{queue="q"} and {topic="t", subscription="s"}
	// select exactly one target's series.
	m.expired = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ferry", Name: "expired_total",
		Help: "Rows removed by retention before anyone consumed them, by kind: message (of a queue), " +
			"delivery (of a subscription), dead_letter."}, []string{"kind", "queue", "topic", "subscription"})
	m.auditErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ferry", Name: "audit_write_errors_total",
		Help: "Audit log entries that could not be written (the request was answered all the same)."})
	m.authFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ferry", Name: "auth_failures_total",
		Help: "Requests refused for their API key, by reason: missing (no or an ill-formed Authorization header), " +
			"invalid (an unknown, revoked or expired key), forbidden (a valid key without the permission)."}, []string{"reason"})
	for _, r := range []string{authMissing, authInvalid, authForbidden} {
		m.authFailures.WithLabelValues(r) // exported from the start, at 0
	}
	reg.MustRegister(m.httpDuration, m.pushAttempts, m.pushLatency, m.expired, m.auditErrors, m.authFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&depthCollector{cachedGauges{pool: pool, log: log, interval: interval, what: "gauges", read: (*gaugeRead).read,
			descs:     []*prometheus.Desc{depthDesc, ageDesc, headDesc, oldestDesc, subDepthDesc, subAgeDesc, lagDesc, membersDesc},
			refreshed: refreshesDesc}}, &poolCollector{pool: pool},
		newHealthCollector(pool, log, interval))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// ObservePush counts a push attempt; for a success it also records the
// time since the message was sent (or the event published).
func (m *Metrics) ObservePush(outcome string, sinceSent time.Duration) {
	m.pushAttempts.WithLabelValues(outcome).Inc()
	if outcome == "ok" {
		m.pushLatency.Observe(sinceSent.Seconds())
	}
}

// ObservePublished counts events appended to a topic (duplicates
// excluded): by a REST publish, or by the outbox relay for events
// published through the SQL API (store.RelayConfig.Appended).
func (m *Metrics) ObservePublished(topic string, events int) {
	m.published.WithLabelValues(topic).Add(float64(events))
}

// ObserveExpired counts what retention removed from a queue or a
// subscription.
func (m *Metrics) ObserveExpired(x store.Expiry) {
	queue, topic, sub, kind := x.Name, "", "", "message"
	if x.Topic != "" {
		queue, topic, sub, kind = "", x.Topic, x.Name, "delivery"
	}
	if x.Messages > 0 {
		m.expired.WithLabelValues(kind, queue, topic, sub).Add(float64(x.Messages))
	}
	if x.DeadLetters > 0 {
		m.expired.WithLabelValues("dead_letter", queue, topic, sub).Add(float64(x.DeadLetters))
	}
}

// MessagesSent, MessagesReceived, MessagesAcked and MessagesDeadLettered
// count what another face of the broker (the SQS face) did on a queue, in
// the counters the REST routes count theirs.
func (m *Metrics) MessagesSent(queue string, n int) { m.sent.WithLabelValues(queue).Add(float64(n)) }

// MessagesReceived: see [Metrics.MessagesSent].
func (m *Metrics) MessagesReceived(queue string, n int) {
	m.received.WithLabelValues(queue).Add(float64(n))
}

// MessagesAcked: see [Metrics.MessagesSent].
func (m *Metrics) MessagesAcked(queue string, n int) { m.acked.WithLabelValues(queue).Add(float64(n)) }

// MessagesDeadLettered: see [Metrics.MessagesSent].
func (m *Metrics) MessagesDeadLettered(queue string, n int) {
	m.deadLettered.WithLabelValues(queue).Add(float64(n))
}

// auditWriteFailed counts an audit log entry that could not be written.
func (m *Metrics) auditWriteFailed() { m.auditErrors.Inc() }

// authFailed counts a request refused for its key (reason: authMissing,
// authInvalid or authForbidden).
func (m *Metrics) authFailed(reason string) { m.authFailures.WithLabelValues(reason).Inc() }

// observeGroup counts what a poll or describe changed in passing.
func (m *Metrics) observeGroup(topic, group string, r store.ConsumerGroupRefresh) {
	if r.Rebalanced {
		m.rebalances.WithLabelValues(topic, group).Inc()
	}
	if r.Evicted > 0 {
		m.evictions.WithLabelValues(topic, group).Add(float64(r.Evicted))
	}
	if r.Skipped > 0 {
		m.expiredSkipped.WithLabelValues(topic, group).Add(float64(r.Skipped))
	}
}

func (m *Metrics) observeHTTP(method, route string, status int, took time.Duration) {
	m.httpDuration.WithLabelValues(method, route, strconv.Itoa(status)).Observe(took.Seconds())
}

// The descriptors of the collected gauges: immutable, shared by every
// Metrics (a descriptor names a metric, it holds no value).
var (
	depthDesc = prometheus.NewDesc("ferry_queue_messages", "Messages in a queue by state.",
		[]string{"queue", "state"}, nil)
	ageDesc = prometheus.NewDesc("ferry_queue_oldest_age_seconds", "Age of the oldest live message of a queue.",
		[]string{"queue"}, nil)
	headDesc = prometheus.NewDesc("ferry_topic_head_offset", "Offset of the newest event of a topic partition (-1 when empty).",
		[]string{"topic", "partition"}, nil)
	oldestDesc = prometheus.NewDesc("ferry_topic_oldest_offset", "Oldest retained offset of a topic partition.",
		[]string{"topic", "partition"}, nil)
	subDepthDesc = prometheus.NewDesc("ferry_subscription_messages",
		"Deliveries of a subscription by state (available includes ordered ones waiting behind their key).",
		[]string{"topic", "subscription", "state"}, nil)
	lagDesc = prometheus.NewDesc("ferry_consumer_group_lag", "Events of a partition after the group's committed offset.",
		[]string{"topic", "group", "partition"}, nil)
	membersDesc = prometheus.NewDesc("ferry_consumer_group_members", "Members of a consumer group (as of their last poll).",
		[]string{"topic", "group"}, nil)
	subAgeDesc = prometheus.NewDesc("ferry_subscription_oldest_age_seconds",
		"Age of the oldest pending delivery of a subscription (since its event's publish).",
		[]string{"topic", "subscription"}, nil)
	refreshesDesc = prometheus.NewDesc("ferry_metrics_refreshes_total",
		"Reads of the database-derived gauges (at most one per FERRY_METRICS_INTERVAL, however many scrapes).",
		nil, nil)
)

// depthCollector exposes the gauges read from the database: queue,
// subscription and group depths, ages, offsets and lags. A scrape within
// interval of the last read gets that read's values; one read runs at a
// time, and scrapes arriving meanwhile wait for it and share it, so
// however often and concurrently /metrics is scraped the database sees at
// most one read per interval.
type depthCollector struct {
	cachedGauges
}

// cachedGauges is a set of database-derived gauges read at most once per
// interval (0: at every scrape) by read, shared by the scrapes meanwhile:
// a prometheus.Collector of the gauges descs and the counter refreshed of
// its reads.
type cachedGauges struct {
	pool      *pgxpool.Pool
	log       *slog.Logger
	interval  time.Duration
	what      string // in the warning of a failed read
	read      func(r *gaugeRead, ctx context.Context, pool *pgxpool.Pool) error
	descs     []*prometheus.Desc
	refreshed *prometheus.Desc

	mu        sync.Mutex
	readAt    time.Time
	cached    []prometheus.Metric
	refreshes int // reads so far, exposed with the gauges they made
}

func (c *cachedGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.refreshed
}

func (c *cachedGauges) Collect(ch chan<- prometheus.Metric) {
	gauges, refreshes := c.current()
	for _, m := range gauges {
		ch <- m
	}
	ch <- prometheus.MustNewConstMetric(c.refreshed, prometheus.CounterValue, float64(refreshes))
}

// current returns the gauges, read again if the last read is older than
// the interval, and the number of reads so far.
func (c *cachedGauges) current() ([]prometheus.Metric, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.interval > 0 && !c.readAt.IsZero() && time.Since(c.readAt) < c.interval {
		return c.cached, c.refreshes
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.refreshes++
	r := &gaugeRead{}
	if err := c.read(r, ctx, c.pool); err != nil {
		// What was read before the failure is shown; the next read waits
		// for the interval like any other, so a failing database is not
		// asked at every scrape.
		c.log.Warn("metrics: read "+c.what, "error", err)
	}
	c.cached, c.readAt = r.out, time.Now()
	return c.cached, c.refreshes
}

// gaugeRead is one read of the database-derived gauges.
type gaugeRead struct {
	out    []prometheus.Metric
	topics map[int64]string // names by id
}

func (r *gaugeRead) add(desc *prometheus.Desc, v float64, labels ...string) {
	r.out = append(r.out, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...))
}

func (r *gaugeRead) read(ctx context.Context, pool *pgxpool.Pool) error {
	for _, step := range []func(context.Context, *pgxpool.Pool) error{r.queues, r.topicOffsets, r.subscriptions, r.groups} {
		if err := step(ctx, pool); err != nil {
			return err
		}
	}
	return nil
}

func (r *gaugeRead) addStates(desc *prometheus.Desc, s store.QueueStats, labels ...string) {
	for state, v := range map[string]int64{
		"available": s.Available, "in_flight": s.InFlight, "delayed": s.Delayed, "dead_letters": s.DeadLetters,
	} {
		r.add(desc, float64(v), append(labels, state)...)
	}
}

func (r *gaugeRead) queues(ctx context.Context, pool *pgxpool.Pool) error {
	queues, _, err := store.QueueList(ctx, pool, store.QueueListParams{}) // every queue
	if err != nil {
		return fmt.Errorf("list queues: %w", err)
	}
	stats, err := store.QueueStatsGet(ctx, pool, idsOf(queues, func(q store.Queue) int64 { return q.ID }))
	if err != nil {
		return fmt.Errorf("queue stats: %w", err)
	}
	for _, q := range queues {
		s := stats[q.ID]
		r.addStates(depthDesc, s, q.Name)
		r.add(ageDesc, float64(s.OldestAgeSeconds), q.Name)
	}
	return nil
}

func (r *gaugeRead) topicOffsets(ctx context.Context, pool *pgxpool.Pool) error {
	topics, _, err := store.TopicList(ctx, pool, store.TopicListParams{}) // every topic
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	offs, err := store.TopicOffsets(ctx, pool, idsOf(topics, func(t store.Topic) int64 { return t.ID }))
	if err != nil {
		return fmt.Errorf("topic offsets: %w", err)
	}
	r.topics = make(map[int64]string, len(topics))
	for _, t := range topics {
		r.topics[t.ID] = t.Name
		for _, o := range offs[t.ID] {
			p := strconv.Itoa(o.Partition)
			r.add(headDesc, float64(o.HeadOffset), t.Name, p)
			r.add(oldestDesc, float64(o.OldestOffset), t.Name, p)
		}
	}
	return nil
}

func (r *gaugeRead) subscriptions(ctx context.Context, pool *pgxpool.Pool) error {
	subs, err := store.SubscriptionListAll(ctx, pool)
	if err != nil {
		return fmt.Errorf("list subscriptions: %w", err)
	}
	stats, err := store.QueueStatsGet(ctx, pool, idsOf(subs, func(s store.Subscription) int64 { return s.ID }))
	if err != nil {
		return fmt.Errorf("subscription stats: %w", err)
	}
	for _, sub := range subs {
		topic, ok := r.topics[sub.TopicID]
		if !ok {
			continue // created after the topics were listed
		}
		s := stats[sub.ID]
		r.addStates(subDepthDesc, s, topic, sub.Name)
		r.add(subAgeDesc, float64(s.OldestAgeSeconds), topic, sub.Name)
	}
	return nil
}

func (r *gaugeRead) groups(ctx context.Context, pool *pgxpool.Pool) error {
	lags, err := store.ConsumerGroupLags(ctx, pool)
	if err != nil {
		return fmt.Errorf("group lags: %w", err)
	}
	for _, l := range lags {
		topic, ok := r.topics[l.TopicID]
		if !ok {
			continue
		}
		if l.Partition < 0 {
			r.add(membersDesc, float64(l.Lag), topic, l.Group)
			continue
		}
		r.add(lagDesc, float64(l.Lag), topic, l.Group, strconv.Itoa(l.Partition))
	}
	return nil
}
