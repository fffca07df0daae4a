// Package server assembles a Ferry server from its configuration: the
// database pool, migrations, River, the send coalescer, the notifier and
// the HTTP handlers. `ferry serve`, `ferry dev`, the end-to-end tests and
// the benchmark all boot it the same way.
package server

import (
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
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/handlers/console"
	"github.com/ferry-mq/ferry/handlers/sqs"
	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/metrics"
	"github.com/ferry-mq/ferry/internal/pgconfig"
	"github.com/ferry-mq/ferry/internal/push"
	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/migrations"
	"github.com/ferry-mq/ferry/openapi"
	"github.com/ferry-mq/ferry/store"
)

// Config is Ferry's configuration, read from FERRY_* environment
// variables (see docs/configuration.md) by [LoadConfig]. A variable that is
// unset takes the field's default tag ([DefaultConfig]), or under `ferry
// dev` its dev tag where it has one.
type Config struct {
	DatabaseURL      string        `envconfig:"FERRY_DATABASE_URL"`
	Listen           string        `envconfig:"FERRY_LISTEN" default:":8080" dev:"127.0.0.1:8080"`
	AdminKey         string        `envconfig:"FERRY_ADMIN_KEY"`
	AllowPrivatePush bool          `envconfig:"FERRY_ALLOW_PRIVATE_PUSH" default:"false" dev:"true"`
	MaxBodyBytes     int           `envconfig:"FERRY_MAX_BODY_BYTES" default:"262144"`
	MaxBatch         int           `envconfig:"FERRY_MAX_BATCH" default:"1000"`
	MaxRequestBytes  int64         `envconfig:"FERRY_MAX_REQUEST_BYTES" default:"10485760"`
	ShutdownTimeout  time.Duration `envconfig:"FERRY_SHUTDOWN_TIMEOUT" default:"25s"`
	DBMaxConns       int32         `envconfig:"FERRY_DB_MAX_CONNS" default:"20"`
	SendWorkers      int           `envconfig:"FERRY_SEND_WORKERS" default:"4"`
	NotifyWindow     time.Duration `envconfig:"FERRY_NOTIFY_WINDOW" default:"10ms"`
	FallbackPoll     time.Duration `envconfig:"FERRY_FALLBACK_POLL" default:"1s"`
	RetentionEvery   time.Duration `envconfig:"FERRY_RETENTION_EVERY" default:"1m"`
	LogLevel         string        `envconfig:"FERRY_LOG_LEVEL" default:"info"`
	LogFormat        string        `envconfig:"FERRY_LOG_FORMAT" default:"text"`
	// SkipMigrations leaves the schema alone at start (for `migrate` users
	// who migrate separately).
	SkipMigrations bool `envconfig:"FERRY_SKIP_MIGRATIONS" default:"false"`
	// PushWorkers bounds the push targets one instance serves at once.
	PushWorkers int `envconfig:"FERRY_PUSH_WORKERS" default:"100"`
	// PushDisableAfter disables push to an endpoint whose every attempt
	// has failed for this long.
	PushDisableAfter time.Duration `envconfig:"FERRY_PUSH_DISABLE_AFTER" default:"120h"`
	// PushAttemptRetention is how long push attempts are kept.
	PushAttemptRetention time.Duration `envconfig:"FERRY_PUSH_ATTEMPT_RETENTION" default:"72h"`
	// AuditRetention is how long audit log entries are kept (GET
	// /v1/audit); older ones are removed by the retention sweep.
	AuditRetention time.Duration `envconfig:"FERRY_AUDIT_RETENTION" default:"2160h"`
	// BodyReadTimeout bounds how long a request's body may take to
	// arrive, counted from the end of its headers (0: no bound). Long
	// polls are not cut by it: they wait after their body was read.
	BodyReadTimeout time.Duration `envconfig:"FERRY_BODY_READ_TIMEOUT" default:"30s"`
	// WriteTimeout bounds how long an answer may take to be written,
	// counted from its first byte (0: no bound): a client that does not
	// read its answer has its connection closed. Long polls are not cut
	// by it: they wait before they write.
	WriteTimeout time.Duration `envconfig:"FERRY_WRITE_TIMEOUT" default:"60s"`
	// MetricsInterval is how long the database-derived gauges of /metrics
	// are reused before a scrape reads them again (0: every scrape).
	MetricsInterval time.Duration `envconfig:"FERRY_METRICS_INTERVAL" default:"5s"`
	// DatabaseDirectURL is a session-capable URL of the same database
	// (PostgreSQL itself, or a session-mode pooler) for what needs a
	// session: migrations, LISTEN, River, session advisory locks. Set it
	// when DatabaseURL goes through a transaction-mode pooler such as
	// PgBouncer; see pools.go.
	DatabaseDirectURL string `envconfig:"FERRY_DATABASE_DIRECT_URL"`
	// DBDirectMaxConns sizes the direct pool (with DatabaseDirectURL).
	DBDirectMaxConns int32 `envconfig:"FERRY_DB_DIRECT_MAX_CONNS" default:"5"`
	// DBTCPUserTimeout bounds how long a database connection waits for
	// the server to acknowledge what it sent (TCP_USER_TIMEOUT, Linux)
	// and, through TCP keepalives, how long an idle one takes to notice
	// that the server's host is gone; 0: neither (pgx's defaults). See
	// dial.go.
	DBTCPUserTimeout time.Duration `envconfig:"FERRY_DB_TCP_USER_TIMEOUT" default:"30s"`
	// DataDir is where `ferry dev` keeps its private PostgreSQL and the
	// admin key (`ferry dev` only).
	DataDir string `envconfig:"FERRY_DATA_DIR" default:".ferry"`
	// TLSCertFile and TLSKeyFile name a PEM certificate (its chain after
	// it) and its private key. With both set Ferry serves HTTPS, HTTP/2
	// and HTTP/1.1, on Listen, and reads the two files again on SIGHUP
	// (Server.ReloadCertificate); with neither it serves plain HTTP.
	TLSCertFile string `envconfig:"FERRY_TLS_CERT_FILE"`
	TLSKeyFile  string `envconfig:"FERRY_TLS_KEY_FILE"`
	// PublicURL is the base URL clients reach Ferry at: the base of the
	// SQS face's QueueUrls, and, when https, what makes the console's
	// session cookie Secure behind a TLS-ending proxy; empty: each
	// request's own.
	PublicURL string `envconfig:"FERRY_PUBLIC_URL"`
	// SecretKey is the server key (32 bytes, base64) that seals the
	// secrets of new API keys, so that SQS signatures (SigV4) can be
	// checked and a database dump alone yields no secret; unset: keys are
	// made without one and work over REST only. `ferry dev` makes one and
	// keeps it in DataDir. See docs/keys.md.
	SecretKey string `envconfig:"FERRY_SECRET_KEY"`
	// SecretKeyPrevious is a server key that still opens what it sealed
	// but seals nothing: for rotating SecretKey (docs/keys.md).
	SecretKeyPrevious string `envconfig:"FERRY_SECRET_KEY_PREVIOUS"`
	// MetricsKey, when set, is the Bearer token GET /metrics requires
	// (for deployments that expose the port); unset, /metrics is open.
	MetricsKey string `envconfig:"FERRY_METRICS_KEY"`
	// Version is the binary's version, sent in User-Agent (not from the
	// environment).
	Version string `ignored:"true"`
	// Resolver turns API keys into their permissions (not from the
	// environment); nil: the admin key, then the keys of the database
	// (POST /v1/keys). Tests set their own.
	Resolver access.Resolver `ignored:"true"`
	// SQSKeys looks up the SQS face's access key ids other than admin (not
	// from the environment); nil: the keys of the database, by their
	// sealed secrets ([Server.SQSKey]). Tests may set their own.
	SQSKeys sqs.KeyFunc `ignored:"true"`
	// SampleEvery is how often the console's history is written (not
	// from the environment); 0: a minute. See store.SamplesWrite.
	SampleEvery time.Duration `ignored:"true"`
	// KeyFlushEvery is how often the keys' uses are written
	// (last_used_at; not from the environment); 0: store.KeyUsedEvery.
	KeyFlushEvery time.Duration `ignored:"true"`
}

// defaultConnectTimeout bounds each connection attempt to one host when
// FERRY_DATABASE_URL sets no connect_timeout.
const defaultConnectTimeout = pgconfig.DefaultConnectTimeout

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
	if err := c.checkTCPUserTimeout(); err != nil {
		return err
	}
	if _, err := c.keySealer(); err != nil {
		return err
	}
	return c.checkTLS()
}

// keySealer is the sealer of API key secrets that SecretKey and
// SecretKeyPrevious configure; nil when SecretKey is unset.
func (c Config) keySealer() (*store.KeySealer, error) {
	if c.SecretKey == "" {
		if c.SecretKeyPrevious != "" {
			return nil, errors.New("FERRY_SECRET_KEY_PREVIOUS is set without FERRY_SECRET_KEY: the previous key only opens what it sealed, and new keys need a current one")
		}
		return nil, nil
	}
	current, err := store.ParseKeySealKey(c.SecretKey)
	if err != nil {
		return nil, fmt.Errorf("FERRY_SECRET_KEY %w", err)
	}
	var previous [][]byte
	if c.SecretKeyPrevious != "" {
		p, err := store.ParseKeySealKey(c.SecretKeyPrevious)
		if err != nil {
			return nil, fmt.Errorf("FERRY_SECRET_KEY_PREVIOUS %w", err)
		}
		previous = append(previous, p)
	}
	return store.NewKeySealer(current, previous...)
}

// checkTLS refuses one of the two TLS files without the other: serving
// plain HTTP when HTTPS was asked for half-way would be a silent
// downgrade.
func (c Config) checkTLS() error {
	switch {
	case c.TLSCertFile != "" && c.TLSKeyFile == "":
		return errors.New("FERRY_TLS_KEY_FILE is missing: FERRY_TLS_CERT_FILE is set, and HTTPS needs both (or neither)")
	case c.TLSCertFile == "" && c.TLSKeyFile != "":
		return errors.New("FERRY_TLS_CERT_FILE is missing: FERRY_TLS_KEY_FILE is set, and HTTPS needs both (or neither)")
	}
	return nil
}

// fetchPollInterval is how often River looks for jobs without being told
// (see river.Config.FetchPollInterval).
const fetchPollInterval = 30 * time.Second

// relayPollInterval is how often the outbox relay looks for pending SQL
// API events without having heard a NOTIFY. A fallback: a NOTIFY is not
// lost while the listener is connected, the Notifier wakes the relay
// whenever it reconnects, and a failed batch is retried with a backoff of
// its own. A publish skips its NOTIFY while some relay is awake
// (store/event_relay_awake.go); if that relay's instance dies within the
// second after such a publish read its row, the event waits for the next
// NOTIFY or this poll (a relay that stops waits for such publishes
// first). An idle Ferry reads once every five minutes (the idle minute's
// budget is 60 transactions, most of them River's; TestIdleServerIsQuiet).
const relayPollInterval = 5 * time.Minute

// pingAfterIdle is how long a pooled connection may sit idle before the
// pool checks it with a ping when handing it out.
const pingAfterIdle = 30 * time.Second

// Server is a running Ferry.
type Server struct {
	cfg       Config
	log       *slog.Logger
	pool      *pgxpool.Pool
	pools     pools
	river     *river.Client[pgx.Tx]
	sender    *store.Sender
	publisher *store.Publisher
	relay     *store.Relay
	notifier  *store.Notifier
	keys      keyStore
	pusher    *push.Pusher
	http      *http.Server
	cert      *certificate // nil without TLS
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
	// A certificate that does not load stops the start before the
	// database is touched.
	cert, err := loadConfiguredCertificate(cfg, log)
	if err != nil {
		return nil, err
	}
	if !cfg.SkipMigrations {
		// Migrations hold session advisory locks: over the direct URL.
		if err := migrations.Up(ctx, cfg.SessionURL()); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
	}
	ps, err := openPools(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, pool: ps.main, pools: ps, cert: cert, stop: make(chan struct{}), served: make(chan error, 1)}
	ok := false
	defer func() {
		if !ok {
			ps.close()
		}
	}()

	// The engine's statements need READ COMMITTED: refuse a database that
	// gives Ferry's sessions another default (on both pools: PgBouncer's
	// may connect as another role).
	pools := []*pgxpool.Pool{ps.main}
	if ps.direct != ps.main {
		pools = append(pools, ps.direct)
	}
	for _, p := range pools {
		if err := store.IsolationCheck(ctx, p); err != nil {
			return nil, err
		}
	}
	// The SQL API applies the REST request limits.
	if err := store.SQLLimitsSet(ctx, s.pool, cfg.MaxBodyBytes, cfg.MaxBatch); err != nil {
		return nil, fmt.Errorf("sql api limits: %w", err)
	}
	w, err := s.startNotifier(ctx)
	if err != nil {
		return nil, err
	}
	s.newPusher(w.metrics)
	bgCtx, err := s.startRiver(w.metrics)
	if err != nil {
		return nil, err
	}
	w.queues = s.startEngines(bgCtx, w)
	if err := s.listen(ctx, s.handler(w)); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// wiring is what New's steps make for the steps after them.
type wiring struct {
	keys     keyStore
	hasher   *store.KeyHasher
	resolver access.Resolver
	metrics  *metrics.Metrics
	queues   *store.QueueCache
}

// loadConfiguredCertificate loads the TLS certificate cfg names, if any
// (nil without TLS).
func loadConfiguredCertificate(cfg Config, log *slog.Logger) (*certificate, error) {
	if cfg.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := loadCertificate(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		return nil, err
	}
	logCertificate(log, "TLS certificate loaded", cert.current.Load())
	return cert, nil
}

// startNotifier makes the Notifier and what must exist before it runs
// (the key cache), the key hasher, the resolver and the metrics.
func (s *Server) startNotifier(ctx context.Context) (wiring, error) {
	cfg, pool, ps := s.cfg, s.pool, s.pools
	// The Notifier LISTENs: on a session.
	s.notifier = store.NewNotifier(ps.direct, cfg.NotifyWindow, s.log.With("component", "notifier"))
	// The key cache forgets deleted keys, and the unknown secrets it
	// remembers when a key is created, through the Notifier: made before
	// it runs.
	sealer, err := cfg.keySealer()
	if err != nil {
		return wiring{}, err
	}
	s.sealKeys(ctx, sealer)
	keys, err := newKeyStore(ctx, pool, s.notifier, sealer, s.log.With("component", "keys"))
	if err != nil {
		return wiring{}, err
	}
	s.keys = keys
	hasher, err := store.NewKeyHasher(ctx, pool)
	if err != nil {
		return wiring{}, fmt.Errorf("api keys: %w", err)
	}
	resolver := cfg.Resolver
	if resolver == nil {
		resolver = access.Chain(access.NewAdminKey(cfg.AdminKey), keys)
	}
	metrics := metrics.New(pool, s.log, cfg.MetricsInterval)
	metrics.ObserveParked(s.notifier.Parked)
	metrics.ObserveNotifyIgnored(s.notifier.Ignored)
	if ps.direct != ps.main {
		metrics.ObservePool("direct", ps.direct)
	}
	return wiring{keys: keys, hasher: hasher, resolver: resolver, metrics: metrics}, nil
}

// newPusher makes the push engine (run by startEngines).
func (s *Server) newPusher(metrics *metrics.Metrics) {
	version := s.cfg.Version
	if version == "" {
		version = "dev"
	}
	s.pusher = push.New(s.pool, push.Config{
		Client:       push.NewClient(s.cfg.AllowPrivatePush),
		UserAgent:    "Ferry/" + version,
		DisableAfter: s.cfg.PushDisableAfter,
		Workers:      s.cfg.PushWorkers,
		Notifier:     s.notifier,
		Stop:         s.stop,
		Log:          s.log.With("component", "push"),
		Observe:      metrics.ObservePush,
	})
	// The id this instance's push leases carry (ferry.push_leases.owner).
	s.log.Info("push delivery", "instance", s.pusher.ID(), "workers", s.cfg.PushWorkers)
}

// startRiver makes and starts the River client with Ferry's jobs, and
// returns the context of the background work (ended by s.cancel).
func (s *Server) startRiver(metrics *metrics.Metrics) (context.Context, error) {
	cfg, log := s.cfg, s.log
	riverLog := slog.New(riverLogHandler{log.Handler()}).With("component", "river")
	rcfg := &river.Config{
		Logger:       riverLog,
		ErrorHandler: jobErrorLogger{log: log.With("component", "jobs")},
		Queues: map[string]river.QueueConfig{
			river.QueueDefault: {MaxWorkers: 10},
		},
		// Jobs are fetched when River's NOTIFY says one was inserted or
		// became due; the poll is only the fallback for a lost
		// notification. At River's default (1 s) each queue's poll alone
		// would commit 60 transactions an idle minute (DESIGN.md
		// invariant 12).
		FetchPollInterval: fetchPollInterval,
	}
	jobs.Register(rcfg, s.pool, jobs.Config{
		RetentionEvery: cfg.RetentionEvery, AttemptRetention: cfg.PushAttemptRetention, AuditRetention: cfg.AuditRetention,
		Log: log.With("component", "retention"), ObserveExpired: metrics.ObserveExpired,
	})
	// River LISTENs and runs its own statements: on the direct pool. Its
	// jobs are still inserted in the hot path's transactions (InsertTx),
	// and its workers use the main pool.
	var err error
	s.river, err = river.NewClient(riverpgxv5.New(s.pools.direct), rcfg)
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	bgCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if err := s.river.Start(bgCtx); err != nil {
		cancel()
		return nil, fmt.Errorf("start river: %w", err)
	}
	return bgCtx, nil
}

// startEngines makes the relay, runs the background loops (notifier,
// relay, push engine, key use flush), and makes the sender and the
// publisher; it returns the queue cache the sender and the handlers share.
func (s *Server) startEngines(bgCtx context.Context, w wiring) *store.QueueCache {
	cfg, pool, log, keys := s.cfg, s.pool, s.log, w.keys
	flushEvery := cfg.KeyFlushEvery
	if flushEvery <= 0 {
		flushEvery = store.KeyUsedEvery
	}
	published := func(topicIDs, subscriptionIDs []int64) {
		keys := make([]int64, 0, len(topicIDs)+len(subscriptionIDs))
		for _, id := range topicIDs {
			keys = append(keys, store.TopicWakeKey(id))
		}
		// A subscription is a queue: its id is its key.
		s.notifier.Published(append(keys, subscriptionIDs...))
		s.pusher.Kick(bgCtx, subscriptionIDs)
	}
	// The outbox relay of the SQL API hears ferry.publish's NOTIFY
	// through the Notifier: made before it runs.
	s.relay = store.NewRelay(pool, s.notifier, store.RelayConfig{
		Published: published, Appended: w.metrics.ObservePublished, FallbackPoll: relayPollInterval,
		Log: log.With("component", "relay"),
	})
	s.bg.Add(5)
	go func() { defer s.bg.Done(); s.sample(bgCtx, log.With("component", "console")) }()
	go func() { defer s.bg.Done(); s.notifier.Run(bgCtx) }()
	go func() { defer s.bg.Done(); s.relay.Run(bgCtx) }()
	go func() { defer s.bg.Done(); s.pusher.Run(bgCtx) }()
	go func() { defer s.bg.Done(); keys.flushKeyUses(bgCtx, flushEvery, log.With("component", "keys")) }()
	queues := store.NewQueueCache(time.Second)
	s.sender = store.NewSender(pool, store.SenderConfig{
		Workers: cfg.SendWorkers, Queues: queues,
		Committed: func(queueIDs []int64) {
			s.notifier.Published(queueIDs)
			s.pusher.Kick(bgCtx, queueIDs)
		},
	})

	s.publisher = store.NewPublisher(pool, store.PublisherConfig{Workers: cfg.SendWorkers, Published: published})
	return queues
}

// handler makes the HTTP handlers of the server: the REST face, with the
// SQS face and the console (/ui/) mounted on it.
func (s *Server) handler(w wiring) http.Handler {
	e := s.restHandler(w)
	cfg := s.cfg
	keys := cfg.SQSKeys
	if keys == nil {
		keys = w.keys.SQSKey
	}
	sqs.Mount(e, sqs.Deps{
		Pool: s.pool, Sender: s.sender, Queues: w.queues, Notifier: s.notifier, River: s.river,
		Log: s.log, Metrics: w.metrics, AdminKey: cfg.AdminKey, Keys: keys, PublicURL: cfg.PublicURL,
		Limits:       handlers.Limits{MaxBodyBytes: cfg.MaxBodyBytes, MaxBatch: cfg.MaxBatch, MaxRequestBytes: cfg.MaxRequestBytes},
		Stop:         s.stop,
		Background:   &s.bg, // joined by stopBackground, before the pool closes
		FallbackPoll: cfg.FallbackPoll,
	})
	console.Mount(e, console.Deps{
		API: e, Resolver: w.resolver, KeyByID: w.keys.KeyByID(cfg.AdminKey),
		Secret: console.DeriveSecret(cfg.AdminKey, cfg.SecretKey), Pool: s.pool, Log: s.log.With("component", "console"),
		PublicURL: cfg.PublicURL,
	})
	return e
}

// restHandler makes the REST face.
func (s *Server) restHandler(w wiring) *echo.Echo {
	cfg := s.cfg
	return handlers.New(handlers.Deps{
		Pool:      s.pool,
		Sender:    s.sender,
		Publisher: s.publisher,
		Queues:    w.queues,
		Notifier:  s.notifier,
		River:     s.river,
		Log:       s.log,
		AdminKey:  cfg.AdminKey,
		Resolver:  w.resolver,
		Keys:      handlers.KeyStore{Hasher: w.hasher, Sealer: w.keys.sealer, Forget: w.keys.cache.Forget, ForgetMissing: w.keys.cache.ForgetMissing},
		Limits: handlers.Limits{
			MaxBodyBytes: cfg.MaxBodyBytes, MaxBatch: cfg.MaxBatch, MaxRequestBytes: cfg.MaxRequestBytes,
		},
		Metrics:          w.metrics,
		MetricsKey:       cfg.MetricsKey,
		SessionPool:      s.pools.direct,
		Pusher:           s.pusher,
		AllowPrivatePush: cfg.AllowPrivatePush,
		Stop:             s.stop,
		Ready:            s.ready,
		Spec:             openapi.Spec(),
		FallbackPoll:     cfg.FallbackPoll,
		BodyReadTimeout:  cfg.BodyReadTimeout,
		WriteTimeout:     cfg.WriteTimeout,
	})
}

// sample writes the console's history (store.SamplesWrite) every
// SampleEvery until ctx ends. Every instance does: a sample is a reading
// of the engine's shared counters, written only where they changed, so
// instances neither count twice nor write when idle.
func (s *Server) sample(ctx context.Context, log *slog.Logger) {
	every := s.cfg.SampleEvery
	if every <= 0 {
		every = time.Minute
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		if err := store.SamplesWrite(ctx, s.pool, time.Time{}); err != nil && ctx.Err() == nil {
			log.Warn("console history not written; the next sample makes up for it", "error", err)
		}
	}
}

// listen opens cfg.Listen and makes the HTTP server of h on it; if it
// cannot, it stops the background work startRiver and startEngines began.
func (s *Server) listen(ctx context.Context, h http.Handler) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		s.stopBackground(ctx)
		return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
	}
	s.ln = handlers.ProblemListener(ln)
	// Headers must arrive within ReadHeaderTimeout and a body within
	// cfg.BodyReadTimeout, and an answer must be written within
	// cfg.WriteTimeout of its start (both set per request by the
	// handlers, so that long polls, which wait after reading and before
	// writing, are not cut: no ReadTimeout or WriteTimeout here); an idle
	// keep-alive connection is closed after IdleTimeout.
	s.http = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	if s.cert != nil {
		s.http.TLSConfig = s.cert.tlsConfig()
	}
	return nil
}

// Start serves HTTP, or HTTPS with HTTP/2 when a certificate is
// configured, in the background.
func (s *Server) Start() {
	go func() {
		var err error
		if s.cert != nil {
			// The certificate comes from TLSConfig.GetCertificate.
			err = s.http.ServeTLS(s.ln, "", "")
		} else {
			err = s.http.Serve(s.ln)
		}
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

// URL is the server's base URL on the loopback interface (https:// with
// TLS).
func (s *Server) URL() string {
	_, port, _ := net.SplitHostPort(s.Addr())
	if s.cert != nil {
		return "https://127.0.0.1:" + port
	}
	return "http://127.0.0.1:" + port
}

// Pool is the server's database pool (for tests and tools).
func (s *Server) Pool() *pgxpool.Pool { return s.pool }

// LongPollsParked is how many long polls wait now on this server (see
// store.Notifier.Parked).
func (s *Server) LongPollsParked() int64 { return s.notifier.Parked() }

func (s *Server) ready(ctx context.Context) error {
	var (
		version int64
		dirty   bool
	)
	if err := s.pool.QueryRow(ctx, `SELECT version, dirty FROM ferry_schema_migrations LIMIT 1`).Scan(&version, &dirty); err != nil {
		return err
	}
	return migrations.Usable(uint(max(0, version)), dirty)
}

// Shutdown stops gracefully: long polls end at once with what they have,
// in-flight requests finish (bounded by ctx), queued sends are written,
// River stops, push workers finish their requests, settle them and
// release their leases (another instance takes their targets at once),
// and the pool closes.
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
	s.pools.close()
}
