package handlers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/metrics"
	"github.com/ferry-mq/ferry/internal/push"
	"github.com/ferry-mq/ferry/store"
)

// Deps is everything the handlers need.
type Deps struct {
	Pool   *pgxpool.Pool
	Sender *store.Sender
	// Publisher appends events with group commit.
	Publisher *store.Publisher
	// Queues caches queue configurations for the hot paths; shared with
	// the Sender so that this instance's changes are seen at once.
	// Required.
	Queues   *store.QueueCache
	Notifier *store.Notifier
	// River inserts jobs (e.g. a deleted queue's cleanup) in the
	// transaction that makes them necessary.
	River *river.Client[pgx.Tx]
	Log   *slog.Logger
	// AdminKey is the bootstrap key (FERRY_ADMIN_KEY), with every
	// permission; the resolver of keys when Resolver is nil.
	AdminKey string
	// Resolver turns a request's Bearer secret into its key; nil: the
	// admin key only.
	Resolver access.Resolver
	Limits   Limits
	Metrics  *metrics.Metrics
	// MetricsKey, when set, is the Bearer token GET /metrics requires
	// (FERRY_METRICS_KEY); empty leaves /metrics open.
	MetricsKey string
	// Stop is closed when the server starts shutting down: long polls end
	// early with what they have.
	Stop <-chan struct{}
	// Ready reports whether the database answers and the schema is current.
	Ready func(ctx context.Context) error
	// Spec is the OpenAPI document served at /openapi.yaml.
	Spec []byte
	// FallbackPoll is how often a long poll checks without a wake-up.
	FallbackPoll time.Duration
	// Pusher starts push delivery when a push target gets work.
	Pusher *push.Pusher
	// AllowPrivatePush lets push URLs name private, loopback and
	// link-local addresses (FERRY_ALLOW_PRIVATE_PUSH).
	AllowPrivatePush bool
	// BodyReadTimeout bounds how long a request's body may take to arrive
	// (0: no bound); see guardBody.
	BodyReadTimeout time.Duration
	// WriteTimeout bounds how long an answer may take to be written,
	// from its headers on (0: no bound); see boundWrite.
	WriteTimeout time.Duration
	// SessionPool serves what needs one session across transactions (a
	// subscription seek holds its queue's advisory lock across its
	// batches): a pool on FERRY_DATABASE_DIRECT_URL when Pool goes through
	// a transaction pooler, else Pool itself. Required.
	SessionPool *pgxpool.Pool
	// Keys serves the key routes (POST/GET/DELETE /v1/keys).
	Keys KeyStore
}

type handler struct {
	Deps
	limits Limits
	queues *store.QueueCache
	topics *store.TopicCache
	subs   *store.SubscriptionCache
	// resolver resolves the keys of requests; rules holds the permission
	// each /v1 route needs (routeRules).
	resolver access.Resolver
	rules    map[string]rule
}

// KeyStore is what the key routes need beside the pool: the hasher of
// secrets; the sealer of secrets (nil: none is kept, and new keys work
// over REST only); Forget, which drops this instance's cached keys at once when
// one is deleted here; and ForgetMissing, which drops the secrets it
// found no key for at once when one is created here (the other instances
// hear the delete's or create's NOTIFY).
type KeyStore struct {
	Hasher        *store.KeyHasher
	Sealer        *store.KeySealer
	Forget        func()
	ForgetMissing func()
}
