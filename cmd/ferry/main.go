// Command ferry is the Ferry message broker: PostgreSQL spoken to over HTTP.
//
//	ferry serve                 API and workers (applies migrations at start)
//	ferry dev                   serve with a private PostgreSQL when none is configured
//	ferry migrate up|down|version
//	ferry version
//
// and a client of a running Ferry (FERRY_URL, FERRY_KEY), noun first:
//
//	ferry queue ls|get|create|delete|send|receive|purge
//	ferry queue dead-letters ls|redrive|purge
//	ferry topic ls|get|create|delete|publish|tail
//	ferry sub ls|get|create|delete|receive|peek|seek|purge
//	ferry group ls|describe|seek
//	ferry key ls|create|revoke
//	ferry completion bash|zsh
//
// Exit codes: 0 done, 1 failed, 2 a wrong command line.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ferry-mq/ferry/internal/server"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: ferry <command>

commands:
  serve                  run the API and background workers (needs FERRY_DATABASE_URL, FERRY_ADMIN_KEY)
  dev                    like serve, with a private PostgreSQL in ./.ferry when FERRY_DATABASE_URL is unset
  migrate up|down|version  manage the schema (needs FERRY_DATABASE_URL)
  version                print the version

client commands (talk to a running Ferry at FERRY_URL with FERRY_KEY; --output table|json):
  queue ls|get|create|delete|send|receive|purge
  queue dead-letters ls|redrive|purge
  topic ls|get|create|delete|publish|tail
  sub ls|get|create|delete|receive|peek|seek|purge
  group ls|describe|seek
  key ls|create|revoke
  completion bash|zsh    print a shell completion script
run "ferry <noun>" to list a noun's commands, "ferry <noun> <verb> --help" for one's flags
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && isCLI(os.Args[1]) {
		code := runCLI(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ferry:", err)
		var u *usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usagef("no command given")
	}
	cfg, err := loadConfig(args[0])
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	switch args[0] {
	case "serve":
		return serve(ctx, cfg, log)
	case "dev":
		return dev(ctx, cfg, log, stdout)
	case "migrate":
		return migrate(ctx, cfg, args[1:], stdout)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "ferry", version)
		return nil
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usagef("unknown command %q", args[0])
}

// loadConfig reads the FERRY_* environment over the defaults of command:
// the dev tags for `ferry dev`, server.DefaultConfig for the others.
func loadConfig(command string) (server.Config, error) {
	cfg, err := server.LoadConfig(command == "dev")
	cfg.Version = version
	return cfg, err
}

// newLogger makes the logger FERRY_LOG_LEVEL (debug, info, warn, error)
// and FERRY_LOG_FORMAT (text, json) ask for; anything else is an error, so
// a typo is caught at start and not by a console that stays silent.
func newLogger(cfg server.Config, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToLower(cfg.LogLevel) {
	case "debug":
		level = slog.LevelDebug
	case "info", "":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, fmt.Errorf("FERRY_LOG_LEVEL: unknown level %q (want debug, info, warn or error)", cfg.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(cfg.LogFormat) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("FERRY_LOG_FORMAT: unknown format %q (want text or json)", cfg.LogFormat)
}

// serve runs until ctx ends (SIGINT/SIGTERM), then shuts down gracefully.
func serve(ctx context.Context, cfg server.Config, log *slog.Logger) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	s, err := server.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	s.Start()
	log.Info("ferry serving", "addr", s.Addr(), "version", version)
	return waitAndShutdown(ctx, s, cfg, log)
}

// waitAndShutdown serves until ctx ends (then shuts down gracefully) or
// serving fails; each SIGHUP meanwhile reloads the TLS certificate files.
func waitAndShutdown(ctx context.Context, s *server.Server, cfg server.Config, log *slog.Logger) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			waiting = false
		case err := <-s.Served():
			return err
		case <-hup: // a bad pair is logged and the current one kept
			_ = s.ReloadCertificate()
		}
	}
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	return s.Shutdown(sctx)
}
