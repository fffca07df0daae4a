package server

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-mq/ferry/internal/pgconfig"
)

// Running behind a transaction pooler (PgBouncer with pool_mode =
// transaction): every transaction, and every statement outside one, may
// run on a different server connection, so nothing that lives in a
// session survives from one to the next. What Ferry does with a session
// goes over FERRY_DATABASE_DIRECT_URL when it is set:
//
//   - migrations (golang-migrate's and Ferry's session advisory locks);
//   - the Notifier's LISTEN connection (and its NOTIFYs, at most one per
//     FERRY_NOTIFY_WINDOW);
//   - River, which LISTENs and elects its leader over its own pool;
//   - a subscription seek, which holds its queue's advisory lock across
//     its batches (handlers.Deps.SessionPool).
//
// Everything else, the hot path, uses FERRY_DATABASE_URL, whose pool then
// runs pgx's QueryExecModeCacheDescribe instead of its default
// QueryExecModeCacheStatement: named prepared statements live on one
// server connection (PgBouncer before 1.21 does not track them), so with
// the default a statement prepared on one server is missing on the next
// ("prepared statement does not exist") or already there for another
// client ("already exists"). CacheDescribe prepares only the unnamed
// statement, caches its description per client connection, and then runs
// each statement in one round trip (Parse, Bind, Execute, Sync): the same
// round trips as the default once warm, binary results, and parameter
// types from the server. QueryExecModeExec and SimpleProtocol also take
// one round trip but guess parameter types from Go types and return text
// (and SimpleProtocol sends a batch as one multi-statement query, one
// implicit transaction); DescribeExec takes two round trips, which a pooler may split between
// servers. A default_query_exec_mode in FERRY_DATABASE_URL is respected.

// execModeParam is the connection string parameter, read by pgx,
// that names the pool's default query exec mode.
const execModeParam = "default_query_exec_mode"

// defaultDirectMaxConns is FERRY_DB_DIRECT_MAX_CONNS's default.
const defaultDirectMaxConns = 5

// SessionURL is the URL for work that needs a session of its own:
// DatabaseDirectURL, or DatabaseURL when that is unset.
func (c Config) SessionURL() string {
	if c.DatabaseDirectURL != "" {
		return c.DatabaseDirectURL
	}
	return c.DatabaseURL
}

// pools are the server's connection pools: main for the hot path, direct
// for sessions (the same pool unless DatabaseDirectURL is set).
type pools struct {
	main, direct *pgxpool.Pool
}

// openPools connects the main pool and, when a direct URL is configured,
// the direct one.
func openPools(ctx context.Context, cfg Config) (pools, error) {
	pcfg, err := mainPoolConfig(cfg)
	if err != nil {
		return pools{}, err
	}
	main, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return pools{}, fmt.Errorf("connect: %w", err)
	}
	if cfg.DatabaseDirectURL == "" {
		return pools{main: main, direct: main}, nil
	}
	dcfg, err := directPoolConfig(cfg)
	if err != nil {
		main.Close()
		return pools{}, err
	}
	direct, err := pgxpool.NewWithConfig(ctx, dcfg)
	if err != nil {
		main.Close()
		return pools{}, fmt.Errorf("connect (FERRY_DATABASE_DIRECT_URL): %w", err)
	}
	return pools{main: main, direct: direct}, nil
}

// mainPoolConfig is the main pool's configuration: FERRY_DATABASE_URL,
// sized by DBMaxConns, in QueryExecModeCacheDescribe when a direct URL is
// set and FERRY_DATABASE_URL names no exec mode of its own.
func mainPoolConfig(cfg Config) (*pgxpool.Config, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("FERRY_DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = cfg.DBMaxConns
	boundConnect(pcfg, cfg.DBTCPUserTimeout)
	if cfg.DatabaseDirectURL != "" {
		raw, err := pgconn.ParseConfig(cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("FERRY_DATABASE_URL: %w", err)
		}
		if _, explicit := raw.RuntimeParams[execModeParam]; !explicit {
			pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
	}
	return pcfg, nil
}

// directPoolConfig is the direct pool's configuration:
// FERRY_DATABASE_DIRECT_URL, sized by DBDirectMaxConns.
func directPoolConfig(cfg Config) (*pgxpool.Config, error) {
	dcfg, err := pgxpool.ParseConfig(cfg.DatabaseDirectURL)
	if err != nil {
		return nil, fmt.Errorf("FERRY_DATABASE_DIRECT_URL: %w", err)
	}
	boundConnect(dcfg, cfg.DBTCPUserTimeout)
	// River holds one connection for its LISTEN; a seek holds one.
	dcfg.MaxConns = max(cmp.Or(cfg.DBDirectMaxConns, defaultDirectMaxConns), 2)
	return dcfg, nil
}

// boundConnect bounds each connection attempt when the URL sets no
// connect_timeout (pgconfig.BoundConnect): without one, pgx would wait two
// minutes in the pool and forever in the notifier's LISTEN connection
// (which copies its pool's configuration) for a host that answers
// nothing. An explicit connect_timeout, 0 included, stands. Once
// connected, a connection waits for a host that vanished at most about
// userTimeout (dbDialFunc; 0: pgx's dialer).
//
// It also pings a connection before handing it out only when it has been
// idle for longer than pingAfterIdle. pgxpool's default pings one idle for
// over a second, and every ping is a transaction: on an idle server, whose
// periodic work takes a connection every few seconds, that alone is tens
// of commits a minute (DESIGN.md invariant 12).
func boundConnect(c *pgxpool.Config, userTimeout time.Duration) {
	pgconfig.BoundConnect(&c.ConnConfig.Config, c.ConnString())
	if dial := dbDialFunc(userTimeout); dial != nil {
		c.ConnConfig.DialFunc = dial
	}
	c.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		return p.IdleDuration > pingAfterIdle
	}
}

// close closes both pools.
func (p pools) close() {
	if p.direct != p.main {
		p.direct.Close()
	}
	p.main.Close()
}
