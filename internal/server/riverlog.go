package server

import (
	"context"
	"log/slog"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// riverLogHandler passes River's log lines on with its informational ones
// lowered to debug: River reports its routine (the "Producer job counts"
// line every 5 seconds, elections, maintenance runs) at info, and an
// operator's console at FERRY_LOG_LEVEL=info should show Ferry's lines,
// not River's chatter. River's warnings and errors keep their level. A
// job's failure, which River reports at info, is logged by jobErrorLogger
// at warn instead.
type riverLogHandler struct{ slog.Handler }

func riverLevel(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (h riverLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, riverLevel(l))
}

func (h riverLogHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = riverLevel(r.Level)
	return h.Handler.Handle(ctx, r)
}

func (h riverLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return riverLogHandler{h.Handler.WithAttrs(attrs)}
}

func (h riverLogHandler) WithGroup(name string) slog.Handler {
	return riverLogHandler{h.Handler.WithGroup(name)}
}

// jobErrorLogger is River's ErrorHandler: it logs a failed or panicking
// job at warn, with its arguments (the queue or topic id it concerns);
// River retries it as usual.
type jobErrorLogger struct{ log *slog.Logger }

func (h jobErrorLogger) HandleError(ctx context.Context, job *rivertype.JobRow, err error) *river.ErrorHandlerResult {
	h.log.WarnContext(ctx, "background job failed", "kind", job.Kind, "job_id", job.ID, "args", string(job.EncodedArgs),
		"attempt", job.Attempt, "max_attempts", job.MaxAttempts, "error", err)
	return nil
}

func (h jobErrorLogger) HandlePanic(ctx context.Context, job *rivertype.JobRow, panicVal any, trace string) *river.ErrorHandlerResult {
	h.log.ErrorContext(ctx, "background job panicked", "kind", job.Kind, "job_id", job.ID, "args", string(job.EncodedArgs),
		"attempt", job.Attempt, "panic", panicVal, "trace", trace)
	return nil
}
