package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// River's informational lines (e.g. "Producer job counts" every 5 s) go
// to debug; its warnings and errors keep their level.
func TestRiverLogLevels(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	river := slog.New(riverLogHandler{base.Handler()}).With("component", "river")
	river.Info("producer: Producer job counts")
	river.Debug("elector: attempting")
	river.Warn("elector: stepping down")
	river.Error("producer: error fetching")
	out := buf.String()
	require.NotContains(t, out, "Producer job counts")
	require.NotContains(t, out, "attempting")
	require.Contains(t, out, "level=WARN msg=\"elector: stepping down\" component=river")
	require.Contains(t, out, "level=ERROR")

	buf.Reset()
	debug := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	slog.New(riverLogHandler{debug.Handler()}).Info("producer: Producer job counts")
	require.True(t, strings.HasPrefix(strings.TrimSpace(buf.String())[strings.Index(buf.String(), "level="):], "level=DEBUG"), buf.String())
	require.True(t, riverLogHandler{debug.Handler()}.Enabled(context.Background(), slog.LevelInfo))
}
