package store_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// The audit log's statements read what their page or batch needs however
// long the log is: a page newest first (from the top, and from a cursor
// deep inside), a batch of expired entries, and the idle sweep's question.
func TestPlansAudit(t *testing.T) {
	t.Parallel()
	none := func(t *testing.T, e *env) *planFixture { return &planFixture{} }
	keep := store.RetentionKeep{PushAttempts: time.Hour, Audit: 24 * time.Hour}
	list := func(deep bool) func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
		return func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
			p := store.AuditPageParams{Limit: 100}
			if deep {
				require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT coalesce(min(id) + 1000, 0) FROM ferry.audit_log`).Scan(&p.Before))
			}
			_, _, err := store.AuditList(e.ctx, db, p)
			require.NoError(t, err)
			return workBound{Batch: 100}
		}
	}
	runPlanCasesNotOnAnalyzedEmpty(t, []planCase{
		{name: "audit_list", setup: none, fill: fillAudit, run: list(false)},
		{name: "audit_list_deep", setup: none, fill: fillAudit, run: list(true)},
		{
			name: "audit_expire", setup: none, fill: fillAudit,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.AuditExpire(e.ctx, db, keep.Audit, 100)
				require.NoError(t, err)
				return workBound{Batch: 100}
			},
		},
		{
			name: "retention_due_audit", setup: none, fill: fillAudit,
			run: func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound {
				_, err := store.RetentionDue(e.ctx, db, keep)
				require.NoError(t, err)
				return workBound{Batch: 1}
			},
		},
	})
}

// fillAudit writes planBacklog entries, one a minute up to now (about a
// month: most of them past a day's retention).
func fillAudit(t *testing.T, e *env, _ *planFixture) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		INSERT INTO ferry.audit_log (at, key_name, action, resource, request_id, status)
		SELECT now() - ($1 - g) * interval '1 minute', 'FERRY_ADMIN_KEY', 'queue.put', 'queue:q' || g, 'r' || g, 201
		FROM generate_series(1, $1) AS g`, planBacklog)
	require.NoError(t, err)
}
