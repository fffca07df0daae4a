package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/store"
)

// dev serves Ferry for local development. With no FERRY_DATABASE_URL it
// starts (or reuses) a private, durable PostgreSQL cluster in
// $FERRY_DATA_DIR/pg (default ./.ferry/pg) on a free local port. The admin
// key and the server key that seals key secrets (for SQS) are generated
// once and kept in the data directory. Ctrl-C stops Ferry
// and then the cluster it started. Its other defaults are the dev tags of
// server.Config.
func dev(ctx context.Context, cfg server.Config, log *slog.Logger, stdout io.Writer) error {
	dataDir, err := filepath.Abs(cmp.Or(cfg.DataDir, server.DefaultConfig().DataDir)) // also when set empty
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if cfg.AdminKey == "" {
		if cfg.AdminKey, err = devAdminKey(dataDir); err != nil {
			return err
		}
	}
	if cfg.SecretKey == "" {
		if cfg.SecretKey, err = devSecretKey(dataDir); err != nil {
			return err
		}
	}

	var cluster *pgcluster.Cluster
	if cfg.DatabaseURL == "" {
		cluster, err = pgcluster.Start(ctx, pgcluster.Options{
			DataDir: filepath.Join(dataDir, "pg"),
			Durable: true,
			Logf:    func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) },
		})
		if err != nil {
			return fmt.Errorf("private PostgreSQL: %w", err)
		}
		defer func() {
			if cluster.Reused() {
				return
			}
			if err := cluster.Stop(context.Background()); err != nil {
				log.Warn("stopping PostgreSQL", "error", err)
			}
		}()
		if err := ensureDatabase(ctx, cluster.URL("postgres"), "ferry"); err != nil {
			return err
		}
		cfg.DatabaseURL = cluster.URL("ferry")
	}

	s, err := server.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	s.Start()
	base := s.URL()
	fmt.Fprintf(stdout, `
Ferry is running.

  base URL   %s
  console    %s/ui/ (sign in with the admin key)
  admin key  %s
  database   %s
  data dir   %s

Try it:

  export FERRY_URL=%s FERRY_KEY=%s
  curl -s -X PUT "$FERRY_URL/v1/queues/jobs" -H "Authorization: Bearer $FERRY_KEY"
  curl -s -X POST "$FERRY_URL/v1/queues/jobs/messages" -H "Authorization: Bearer $FERRY_KEY" \
       -H 'Content-Type: application/json' -d '{"messages":[{"body":{"hello":"world"}}]}'
  curl -s -X POST "$FERRY_URL/v1/queues/jobs/receive" -H "Authorization: Bearer $FERRY_KEY" \
       -H 'Content-Type: application/json' -d '{"wait_seconds":5}'

Press Ctrl-C to stop.
`, base, base, cfg.AdminKey, redact(cfg.DatabaseURL), dataDir, base, cfg.AdminKey)
	return waitAndShutdown(ctx, s, cfg, log)
}

// devAdminKey returns the key stored in dataDir/admin-key, making it on
// first use.
func devAdminKey(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "admin-key")
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) >= 16 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	key := "fk_" + hex.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("store admin key: %w", err)
	}
	return key, nil
}

// devSecretKey returns the server key (FERRY_SECRET_KEY) stored in
// dataDir/secret-key, making it on first use, so that the keys made under
// `ferry dev` work over SQS. A file that holds no valid key is an error,
// never replaced: the secrets sealed under it would stop opening.
func devSecretKey(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "secret-key")
	b, err := os.ReadFile(path)
	if err == nil {
		if _, err := store.ParseKeySealKey(string(b)); err != nil {
			return "", fmt.Errorf("%s: the server key %w", path, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var raw [store.KeySealKeyBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	key := base64.StdEncoding.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("store server key: %w", err)
	}
	return key, nil
}

func ensureDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to private PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return nil
}

// redact hides a password in a database URL.
func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil || cfg.Password == "" {
		return url
	}
	return strings.Replace(url, cfg.Password, "****", 1)
}
