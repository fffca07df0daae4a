package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// auditAdd writes n entries for resource, aged by age (now() is the
// transaction's, so an entry's age is set by its at).
func (e *env) auditAdd(resource string, n int, age time.Duration) {
	e.t.Helper()
	for range n {
		require.NoError(e.t, store.AuditRecord(e.ctx, e.db, store.AuditEntry{KeyName: "FERRY_ADMIN_KEY",
			Action: "queue.put", Resource: resource, RequestID: "r", Status: 201}))
	}
	_, err := e.db.Exec(e.ctx, `UPDATE ferry.audit_log SET at = now() - $1 * interval '1 millisecond' WHERE resource = $2`,
		age.Milliseconds(), resource)
	require.NoError(e.t, err)
}

// AuditList pages newest first: each page's ids below the last one's,
// and more only while some are left.
func TestAuditList(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	e.auditAdd("queue:a", 5, 0)
	var ids []int64
	before := int64(0)
	for {
		page, more, err := store.AuditList(e.ctx, e.db, store.AuditPageParams{Before: before, Limit: 2})
		require.NoError(t, err)
		for _, x := range page {
			ids = append(ids, x.ID)
		}
		if !more {
			require.Len(t, page, 1)
			break
		}
		require.Len(t, page, 2)
		before = page[len(page)-1].ID
	}
	require.Len(t, ids, 5)
	for i := 1; i < len(ids); i++ {
		require.Less(t, ids[i], ids[i-1], "newest (highest id) first")
	}
}

// Retention removes only the entries older than it keeps, at most limit
// a call, and says it is due exactly while some are left.
func TestAuditExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keep := store.RetentionKeep{PushAttempts: time.Hour, Audit: 24 * time.Hour}
	e.auditAdd("queue:young", 3, time.Hour)
	due, err := store.RetentionDue(e.ctx, e.pool, keep)
	require.NoError(t, err)
	require.False(t, due, "young entries are not due")

	e.auditAdd("queue:old", 5, 25*time.Hour)
	due, err = store.RetentionDue(e.ctx, e.pool, keep)
	require.NoError(t, err)
	require.True(t, due)
	var removed []int64
	for {
		n, err := store.AuditExpire(e.ctx, e.db, keep.Audit, 2)
		require.NoError(t, err)
		removed = append(removed, n)
		if n < 2 {
			break
		}
	}
	require.Equal(t, []int64{2, 2, 1}, removed, "bounded batches")
	left, _, err := store.AuditList(e.ctx, e.db, store.AuditPageParams{Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{"queue:young", "queue:young", "queue:young"}, resources(left))
	due, err = store.RetentionDue(e.ctx, e.pool, keep)
	require.NoError(t, err)
	require.False(t, due, "nothing left to remove")
}

func resources(es []store.AuditEntry) []string {
	out := make([]string, len(es))
	for i, x := range es {
		out[i] = x.Resource
	}
	return out
}
