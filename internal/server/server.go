// Package server assembles a Ferry server from its configuration: the
// database pool, migrations, River, the send coalescer, the notifier and
// the HTTP handlers. `ferry serve`, `ferry dev`, the end-to-end tests and
// the benchmark all boot it the same way.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/migrations"
	"github.com/ferry-mq/ferry/openapi"
	"github.com/ferry-mq/ferry/store"
)

// Config is Ferry's configuration, read from FERRY_* environment
// variables (see the README's table).
type Config struct {
	DatabaseURL      string        `envconfig:"DATABASE_URL"`
	Listen           string        `envconfig:"LISTEN" default:":8080"`
	AdminKey         string        `envconfig:"ADMIN_KEY"`
	AllowPrivatePush bool          `envconfig:"ALLOW_PRIVATE_PUSH" default:"false"`
	MaxBodyBytes     int           `envconfig:"MAX_BODY_BYTES" default:"262144"`
	MaxBatch         int           `envconfig:"MAX_BATCH" default:"1000"`
	MaxRequestBytes  int64         `envconfig:"MAX_REQUEST_BYTES" default:"10485760"`
	ShutdownTimeout  time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"25s"`
	DBMaxConns       int32         `envconfig:"DB_MAX_CONNS" default:"20"`
	SendWorkers      int           `envconfig:"SEND_WORKERS" default:"4"`
	NotifyWindow     time.Duration `envconfig:"NOTIFY_WINDOW" default:"10ms"`
	FallbackPoll     time.Duration `envconfig:"FALLBACK_POLL" default:"1s"`
	RetentionEvery   time.Duration `envconfig:"RETENTION_EVERY" default:"1m"`
	LogLevel         string        `envconfig:"LOG_LEVEL" default:"info"`
	LogFormat        string        `envconfig:"LOG_FORMAT" default:"text"`
	// SkipMigrations leaves the schema alone at start (for `migrate` users
	// who migrate separately).
	SkipMigrations bool `envconfig:"SKIP_MIGRATIONS" default:"false"`
	// PushWorkers bounds the push targets one instance serves at once.
	PushWorkers int `envconfig:"PUSH_WORKERS" default:"100"`
	// PushDisableAfter disables push to an endpoint whose every attempt
	// has failed for this long.
	PushDisableAfter time.Duration `envconfig:"PUSH_DISABLE_AFTER" default:"120h"`
	// PushAttemptRetention is how long push attempts are kept.
	PushAttemptRetention time.Duration `envconfig:"PUSH_ATTEMPT_RETENTION" default:"72h"`
	// BodyReadTimeout bounds how long a request's body may take to
	// arrive, counted from the end of its headers (0: no bound). Long
	// polls are not cut by it: they wait after their body was read.
	BodyReadTimeout time.Duration `envconfig:"BODY_READ_TIMEOUT" default:"30s"`
	// MetricsInterval is how long the database-derived gauges of /metrics
	// are reused before a scrape reads them again (0: every scrape).
	MetricsInterval time.Duration `envconfig:"METRICS_INTERVAL" default:"5s"`
	// NoPushSweep leaves out push's periodic sweep (not from the
	// environment; for the idle measurement while push's idle work is
	// being removed elsewhere).
	NoPushSweep bool `ignored:"true"`
	// Version is the binary's version, sent in User-Agent (not from the
	// environment).
	Version string `ignored:"true"`
}

// Check reports the first missing required setting, naming the variable.
func (c Config) Check() error {
	var missing []string
	if c.DatabaseURL == "" {
		missing = append(missing, "FERRY_DATABASE_URL")
	}
	if c.AdminKey == "" {
		missing = append(missing, "FERRY_ADMIN_KEY")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing required configuration: %v (set it in the environment)", missing)
	}
	if len(c.AdminKey) < 16 {
		return errors.New("FERRY_ADMIN_KEY must be at least 16 characters")
	}
	return nil
}

// fetchPollInterval is how often River looks for jobs without being told
// (see river.Config.FetchPollInterval).
const fetchPollInterval = 30 * time.Second

// pingAfterIdle is how long a pooled connection may sit idle before the
// pool checks it with a ping when handing it out.
const pingAfterIdle = 30 * time.Second

// Server is a running Ferry.
type Server struct {
	cfg       Config
	log       *slog.Logger
	pool      *pgxpool.Pool
	river     *river.Client[pgx.Tx]
	sender    *store.Sender
	publisher *store.Publisher
	notifier  *store.Notifier
	pusher    *jobs.Pusher
	http      *http.Server
	ln        net.Listener
	stop      chan struct{}
	cancel    context.CancelFunc
	bg        sync.WaitGroup
	served    chan error
}

// New applies migrations (unless disabled), connects, starts River and the
// notifier, and listens on cfg.Listen. Serving starts with Start.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if !cfg.SkipMigrations {
		if err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("FERRY_DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = cfg.DBMaxConns
	// pgxpool pings a connection idle for over a second before handing it
	// out, and every ping is a transaction: on an idle server, whose
	// periodic work takes a connection every few seconds, that alone is
	// tens of commits a minute (DESIGN.md invariant 12). Connections idle
	// longer than pingAfterIdle are still checked.
	pcfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		return p.IdleDuration > pingAfterIdle
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	s := &Server{cfg: cfg, log: log, pool: pool, stop: make(chan struct{}), served: make(chan error, 1)}
	ok := false
	defer func() {
		if !ok {
			pool.Close()
		}
	}()

	s.notifier = store.NewNotifier(pool, cfg.NotifyWindow, log.With("component", "notifier"))
	metrics := handlers.NewMetrics(pool, log, cfg.MetricsInterval)
	version := cfg.Version
	if version == "" {
		version = "dev"
	}
	s.pusher = jobs.NewPusher(pool, jobs.PushConfig{
		Client:       jobs.NewPushClient(cfg.AllowPrivatePush),
		UserAgent:    "Ferry/" + version,
		DisableAfter: cfg.PushDisableAfter,
		Notifier:     s.notifier,
		Stop:         s.stop,
		Log:          log.With("component", "push"),
		Observe:      metrics.ObservePush,
	})
	riverLog := slog.New(riverLogHandler{log.Handler()}).With("component", "river")
	rcfg := &river.Config{
		Logger:       riverLog,
		ErrorHandler: jobErrorLogger{log: log.With("component", "jobs")},
		Queues: map[string]river.QueueConfig{
			river.QueueDefault: {MaxWorkers: 10},
			jobs.PushQueue:     {MaxWorkers: cmp.Or(max(0, cfg.PushWorkers), 100)},
		},
		// Push jobs are picked up within milliseconds of their insert.
		FetchCooldown: 5 * time.Millisecond,
		// Jobs are fetched when River's NOTIFY says one was inserted or
		// became due; the poll is only the fallback for a lost
		// notification. At River's default (1 s) each queue's poll alone
		// would commit 60 transactions an idle minute (DESIGN.md
		// invariant 12).
		FetchPollInterval: fetchPollInterval,
		// A push job runs at most jobs.PushJobTimeout (under 2 min); one
		// left "running" by a crashed instance is rescued after this, and
		// until then its target waits (nothing is lost: leases expire).
		RescueStuckJobsAfter: jobs.PushJobTimeout(jobs.DefaultPushRunFor) + 20*time.Second,
	}
	jcfg := jobs.Config{
		RetentionEvery: cfg.RetentionEvery, Pusher: s.pusher, AttemptRetention: cfg.PushAttemptRetention,
		Log: log.With("component", "retention"), ObserveExpired: metrics.ObserveExpired,
	}
	if cfg.NoPushSweep {
		jcfg.Pusher = nil
	}
	jobs.Register(rcfg, pool, jcfg)
	s.river, err = river.NewClient(riverpgxv5.New(pool), rcfg)
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	bgCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if err := s.river.Start(bgCtx); err != nil {
		cancel()
		return nil, fmt.Errorf("start river: %w", err)
	}

	s.bg.Add(2)
	go func() { defer s.bg.Done(); s.notifier.Run(bgCtx) }()
	go func() { defer s.bg.Done(); s.pusher.Run(bgCtx, s.river) }()
	queues := store.NewQueueCache(time.Second)
	s.sender = store.NewSender(pool, store.SenderConfig{
		Workers: cfg.SendWorkers, Queues: queues,
		Committed: func(queueIDs []int64) {
			s.notifier.Published(queueIDs)
			s.pusher.Kick(bgCtx, queueIDs)
		},
	})

	s.publisher = store.NewPublisher(pool, store.PublisherConfig{
		Workers: cfg.SendWorkers,
		Published: func(topicIDs, subscriptionIDs []int64) {
			keys := make([]int64, 0, len(topicIDs)+len(subscriptionIDs))
			for _, id := range topicIDs {
				keys = append(keys, store.TopicWakeKey(id))
			}
			// A subscription is a queue: its id is its key.
			s.notifier.Published(append(keys, subscriptionIDs...))
			s.pusher.Kick(bgCtx, subscriptionIDs)
		},
	})

	e := handlers.New(handlers.Deps{
		Pool:      pool,
		Sender:    s.sender,
		Publisher: s.publisher,
		Queues:    queues,
		Notifier:  s.notifier,
		River:     s.river,
		Log:       log,
		AdminKey:  cfg.AdminKey,
		Limits: handlers.Limits{
			MaxBodyBytes: cfg.MaxBodyBytes, MaxBatch: cfg.MaxBatch, MaxRequestBytes: cfg.MaxRequestBytes,
		},
		Metrics:          metrics,
		Pusher:           s.pusher,
		AllowPrivatePush: cfg.AllowPrivatePush,
		Stop:             s.stop,
		Ready:            s.ready,
		Spec:             openapi.Spec(),
		FallbackPoll:     cfg.FallbackPoll,
		BodyReadTimeout:  cfg.BodyReadTimeout,
	})
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		s.stopBackground(ctx)
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	s.ln = handlers.ProblemListener(ln)
	// Headers must arrive within ReadHeaderTimeout and a body within
	// cfg.BodyReadTimeout (set per request by the handlers, so that long
	// polls, which wait after reading, are not cut: no ReadTimeout here);
	// an idle keep-alive connection is closed after IdleTimeout.
	s.http = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	ok = true
	return s, nil
}

// Start serves HTTP in the background.
func (s *Server) Start() {
	go func() {
		err := s.http.Serve(s.ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.served <- err
	}()
}

// Served is closed with the serve loop's error when it ends.
func (s *Server) Served() <-chan error { return s.served }

// Addr is the address the server listens on (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the server's base URL on the loopback interface.
func (s *Server) URL() string {
	_, port, _ := net.SplitHostPort(s.Addr())
	return "http://127.0.0.1:" + port
}

// Pool is the server's database pool (for tests and tools).
func (s *Server) Pool() *pgxpool.Pool { return s.pool }

func (s *Server) ready(ctx context.Context) error {
	latest, err := migrations.Latest()
	if err != nil {
		return err
	}
	var (
		version int64
		dirty   bool
	)
	if err := s.pool.QueryRow(ctx, `SELECT version, dirty FROM ferry_schema_migrations LIMIT 1`).Scan(&version, &dirty); err != nil {
		return err
	}
	if dirty || uint(version) != latest {
		return fmt.Errorf("schema version %d (dirty %v), want %d", version, dirty, latest)
	}
	return nil
}

// Shutdown stops gracefully: long polls end at once with what they have,
// in-flight requests finish (bounded by ctx), queued sends are written,
// River stops, and the pool closes.
func (s *Server) Shutdown(ctx context.Context) error {
	close(s.stop)
	err := s.http.Shutdown(ctx)
	if err != nil {
		_ = s.http.Close()
	}
	s.stopBackground(ctx)
	return err
}

func (s *Server) stopBackground(ctx context.Context) {
	s.sender.Close()
	s.publisher.Close()
	if err := s.river.Stop(ctx); err != nil {
		s.log.Warn("river stop", "error", err)
	}
	s.cancel()
	s.bg.Wait()
	s.pool.Close()
}
