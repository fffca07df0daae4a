package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/migrations"
)

func migrate(ctx context.Context, cfg server.Config, args []string, stdout io.Writer) error {
	if cfg.DatabaseURL == "" {
		return errors.New("missing required configuration: FERRY_DATABASE_URL")
	}
	if len(args) != 1 {
		return errors.New("usage: ferry migrate up|down|version")
	}
	switch args[0] {
	case "up":
		if err := migrations.Up(ctx, cfg.SessionURL()); err != nil {
			return err
		}
	case "down":
		if err := migrations.Down(ctx, cfg.SessionURL()); err != nil {
			return err
		}
	case "version":
	default:
		return fmt.Errorf("unknown migrate command %q (want up, down or version)", args[0])
	}
	v, dirty, err := migrations.Version(ctx, cfg.SessionURL())
	if err != nil {
		return err
	}
	latest, _ := migrations.Latest()
	fmt.Fprintf(stdout, "schema version %d (latest %d)", v, latest)
	if dirty {
		fmt.Fprint(stdout, " DIRTY: a migration failed halfway; fix it and force the version")
	}
	fmt.Fprintln(stdout)
	return nil
}
