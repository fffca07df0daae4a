// Package migrations holds Ferry's schema as numbered golang-migrate files,
// embedded in the binary, and applies them together with River's own
// migrations.
//
// One owner of the schema: Ferry's tables are migrated by golang-migrate
// (table ferry_schema_migrations), River's tables by River's migrator (its
// own river_migration table, in the connection's default schema). Both run
// inside one session-level advisory lock, so several Ferry instances that
// start at once apply each migration exactly once, and a half-migrated
// database is never seen by another starting instance.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/ferry-mq/ferry/internal/pgconfig"
	"github.com/ferry-mq/ferry/store/definitions"
)

//go:embed *.sql
var files embed.FS

// lockKey is the advisory lock held while migrating ("ferry-mi").
const lockKey int64 = 0x66657272d6d69

// table is where golang-migrate records Ferry's schema version.
const table = "ferry_schema_migrations"

// Files returns the embedded migration files (for hashing a test template).
func Files() embed.FS { return files }

// Latest is the newest schema version in this binary.
func Latest() (uint, error) {
	src, err := iofs.New(files, ".")
	if err != nil {
		return 0, err
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0, err
	}
	for {
		next, err := src.Next(v)
		if err != nil {
			return v, nil
		}
		v = next
	}
}

// Up applies every pending Ferry and River migration, and installs the
// functions of the ferry schema after Ferry's ([definitions.Install]). A
// schema that a newer binary has already migrated past this binary's
// latest version is left as it is, definitions included: in a rolling
// deploy the new release migrates first, and the instances of the old
// one keep starting on its schema (Ferry's migrations and definitions
// keep the previous release working; see docs/operations.md).
func Up(ctx context.Context, databaseURL string) error {
	latest, err := Latest()
	if err != nil {
		return err
	}
	return withLock(ctx, databaseURL, func(m *migrate.Migrate, pool *pgxpool.Pool) error {
		v, dirty, err := m.Version()
		ahead := err == nil && !dirty && v > latest
		if !ahead {
			if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
				return fmt.Errorf("migrate ferry schema: %w", err)
			}
			if err := installDefinitions(ctx, pool); err != nil {
				return err
			}
		}
		rm, err := rivermigrate.New(riverpgxv5.New(pool), nil)
		if err != nil {
			return err
		}
		if _, err := rm.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return fmt.Errorf("migrate river schema: %w", err)
		}
		return nil
	})
}

// installDefinitions installs the functions of the ferry schema
// (store/definitions) in a transaction of its own, after the numbered
// migrations, under their lock. A schema a newer binary migrated is left
// to that binary's definitions.
func installDefinitions(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := definitions.Install(ctx, tx)
		return err
	})
}

// Usable reports why this binary cannot serve on a schema at the given
// version, or nil: a schema a migration left dirty, or one older than
// this binary's latest, is not usable; a newer one is (the previous
// release keeps serving while a rolling deploy replaces it).
func Usable(version uint, dirty bool) error {
	latest, err := Latest()
	if err != nil {
		return err
	}
	switch {
	case dirty:
		return fmt.Errorf("schema version %d is dirty (a migration failed part way)", version)
	case version < latest:
		return fmt.Errorf("schema version %d, want %d or newer (run `ferry migrate up`)", version, latest)
	}
	return nil
}

// Down reverts the newest Ferry migration (River's tables are kept: they
// hold no Ferry data and other software may share them).
func Down(ctx context.Context, databaseURL string) error {
	return withLock(ctx, databaseURL, func(m *migrate.Migrate, _ *pgxpool.Pool) error {
		if err := m.Steps(-1); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("migrate down: %w", err)
		}
		return nil
	})
}

// To migrates the schema to exactly version v, up or down, and installs
// no definitions: a database as a release whose latest migration is v
// left it before its functions were installed (upgrade tests write rows
// as that release did, then run [Up]).
func To(ctx context.Context, databaseURL string, v uint) error {
	return withLock(ctx, databaseURL, func(m *migrate.Migrate, _ *pgxpool.Pool) error {
		if err := m.Migrate(v); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("migrate to %d: %w", v, err)
		}
		return nil
	})
}

// Version reports the database's Ferry schema version and whether a failed
// migration left it dirty. Version 0 means no migration has been applied.
func Version(ctx context.Context, databaseURL string) (version uint, dirty bool, err error) {
	err = withLock(ctx, databaseURL, func(m *migrate.Migrate, _ *pgxpool.Pool) error {
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			version, dirty, err = 0, false, nil
		}
		return err
	})
	return version, dirty, err
}

func withLock(ctx context.Context, databaseURL string, fn func(*migrate.Migrate, *pgxpool.Pool) error) error {
	// Connection attempts are bounded as the server's pools' are: a host
	// that answers nothing fails in seconds, or gives way to the URL's
	// next host.
	pcfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	pgconfig.BoundConnect(&pcfg.ConnConfig.Config, databaseURL)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()

	// Hold the lock on a connection of its own for the whole run.
	lockConn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer lockConn.Release()
	if _, err := lockConn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the unlock must run even when ctx is cancelled.
		_, _ = lockConn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", lockKey)
	}()

	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return err
	}
	pgconfig.BoundConnect(&cfg.Config, databaseURL)
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	m, err := newMigrate(db)
	if err != nil {
		return err
	}
	// Close releases golang-migrate's own connection: a database with a
	// session left on it cannot be used as a template, for one.
	defer m.Close()
	return fn(m, pool)
}

func newMigrate(db *sql.DB) (*migrate.Migrate, error) {
	src, err := iofs.New(files, ".")
	if err != nil {
		return nil, err
	}
	drv, err := migratepgx.WithInstance(db, &migratepgx.Config{MigrationsTable: table})
	if err != nil {
		return nil, fmt.Errorf("migrate driver: %w", err)
	}
	return migrate.NewWithInstance("iofs", src, "pgx5", drv)
}
