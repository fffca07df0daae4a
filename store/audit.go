package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The audit log (ferry.audit_log, GET /v1/audit): one row per change a
// key made or tried (the handlers decide which requests those are), read
// newest first by id and removed by age in bounded batches by the
// retention sweep. key_name is copied into each row, so an entry outlives
// its key; key_id is NULL for the bootstrap admin key, which has no row in
// ferry.api_keys.

// AuditEntry is one entry of the audit log.
type AuditEntry struct {
	// ID orders the entries (newest first is highest first); set by
	// AuditList, ignored by AuditRecord.
	ID int64
	// At is when the entry was written; set by AuditList.
	At time.Time
	// KeyID is the key's ferry.api_keys id; nil for the admin key.
	KeyID    *int64
	KeyName  string
	Action   string
	Resource string
	// RequestID is Ferry's own id of the request; ClientRequestID the
	// X-Request-Id the client sent, if any (nil: none).
	RequestID       string
	ClientRequestID *string
	// Status is the HTTP status answered.
	Status int
	// PushFromHost and PushToHost are the hosts of the push URL the
	// request changed or tried to change, before and after (nil: none
	// then); both nil when it changed no push URL.
	PushFromHost, PushToHost *string
}

// AuditRecord writes one entry (one INSERT).
func AuditRecord(ctx context.Context, db DBTX, e AuditEntry) error {
	_, err := db.Exec(ctx, `/* ferry:audit_record */
		INSERT INTO ferry.audit_log (key_id, key_name, action, resource, request_id, status,
			client_request_id, push_from_host, push_to_host)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, e.KeyID, e.KeyName, e.Action, e.Resource, e.RequestID, e.Status,
		e.ClientRequestID, e.PushFromHost, e.PushToHost)
	return interpretError("audit record", err)
}

// AuditPageParams selects one page of the audit log, newest first.
type AuditPageParams struct {
	// Before: only entries with a smaller id (0: from the newest).
	Before int64
	Limit  int
}

// AuditList returns one page of entries, newest (highest id) first, and
// whether more follow. It walks the primary key backwards from Before, so
// a page costs the same wherever it is.
func AuditList(ctx context.Context, db DBTX, p AuditPageParams) ([]AuditEntry, bool, error) {
	before := p.Before
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := db.Query(ctx, `/* ferry:audit_list */
		SELECT id, at, key_id, key_name, action, resource, request_id, status,
			client_request_id, push_from_host, push_to_host
		FROM ferry.audit_log
		WHERE id < $1 ORDER BY id DESC LIMIT $2`, before, pageLimit(p.Limit))
	return pageCollect(rows, err, "audit list", p.Limit, func(row pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := row.Scan(&e.ID, &e.At, &e.KeyID, &e.KeyName, &e.Action, &e.Resource, &e.RequestID, &e.Status,
			&e.ClientRequestID, &e.PushFromHost, &e.PushToHost)
		return e, err
	})
}

// AuditExpire deletes up to limit of the oldest entries written more than
// keep ago, found by the index on at; the retention sweep calls it until
// a call deletes less than limit.
func AuditExpire(ctx context.Context, db DBTX, keep time.Duration, limit int) (int64, error) {
	// The victims are found first (MATERIALIZED) and deleted by the ctid
	// that was read, joined: with "id IN (SELECT ...)" a plan made while
	// the table was small (or never analyzed) hashes the victims and
	// scans the whole log for them.
	tag, err := db.Exec(ctx, `/* ferry:audit_expire */
		WITH victims AS MATERIALIZED (
			SELECT ctid FROM ferry.audit_log WHERE at < now() - $1 * interval '1 millisecond' ORDER BY at LIMIT $2
		)
		DELETE FROM ferry.audit_log a USING (SELECT ctid FROM victims LIMIT $2) v
		WHERE a.ctid = v.ctid AND a.at < now() - $1 * interval '1 millisecond'`,
		keep.Milliseconds(), limit)
	if err != nil {
		return 0, interpretError("audit expire", err)
	}
	return tag.RowsAffected(), nil
}
