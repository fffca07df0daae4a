package jobs_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgtest"
	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/store"
)

// The periodic retention sweep removes audit log entries older than
// AuditRetention, and only those; while none is old it inserts no job.
func TestRetentionRemovesOldAuditEntries(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	for _, r := range []string{"queue:old-1", "queue:old-2", "queue:young"} {
		require.NoError(t, store.AuditRecord(ctx, pool, store.AuditEntry{KeyName: "FERRY_ADMIN_KEY", Action: "queue.put",
			Resource: r, RequestID: "r", Status: 201}))
	}
	_, err := pool.Exec(ctx, `UPDATE ferry.audit_log SET at = now() - interval '2 days' WHERE resource LIKE 'queue:old-%'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE ferry.audit_log SET at = now() - interval '20 hours' WHERE resource = 'queue:young'`)
	require.NoError(t, err)

	rec := &logRecorder{}
	runRiver(t, pool, slog.New(rec), jobs.Config{RetentionEvery: 100 * time.Millisecond, Log: slog.New(rec), AuditRetention: 24 * time.Hour})
	require.Eventually(t, func() bool {
		return count(t, pool, `SELECT count(*) FROM ferry.audit_log`) == 1
	}, 30*time.Second, 20*time.Millisecond, "the sweep removes the old entries")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry.audit_log WHERE resource = 'queue:young'`))
	jobsBefore := count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1`, (jobs.RetentionArgs{}).Kind())
	ticks := len(rec.find("nothing due; no job inserted"))
	require.Eventually(t, func() bool {
		return len(rec.find("nothing due; no job inserted")) >= ticks+3
	}, 30*time.Second, 20*time.Millisecond, "%v", rec.messages())
	require.Equal(t, jobsBefore, count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1`, (jobs.RetentionArgs{}).Kind()),
		"a young entry makes no sweep due")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry.audit_log`))
}
