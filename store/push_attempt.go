package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// PushAttempt is one delivery attempt, as recorded and listed.
type PushAttempt struct {
	MessageID  string
	Attempt    int
	OK         bool
	StatusCode *int
	Error      *string
	Duration   time.Duration
	At         time.Time
}

// PushAttemptRecord records attempts of the queue, in one statement.
func PushAttemptRecord(ctx context.Context, db DBTX, queueID int64, attempts []PushAttempt) error {
	if len(attempts) == 0 {
		return nil
	}
	var (
		ids    = make([]string, len(attempts))
		nums   = make([]int32, len(attempts))
		oks    = make([]bool, len(attempts))
		codes  = make([]*int32, len(attempts))
		errs   = make([]*string, len(attempts))
		millis = make([]int32, len(attempts))
		ats    = make([]time.Time, len(attempts))
	)
	for i, a := range attempts {
		ids[i], nums[i], oks[i], errs[i], ats[i] = a.MessageID, int32(a.Attempt), a.OK, a.Error, a.At
		millis[i] = int32(min(a.Duration.Milliseconds(), 1<<31-1))
		if a.StatusCode != nil {
			c := int32(*a.StatusCode)
			codes[i] = &c
		}
	}
	_, err := db.Exec(ctx, `/* ferry:push_attempt_record */
		INSERT INTO ferry.push_attempts (queue_id, message_id, attempt, ok, status_code, error, duration_ms, at)
		SELECT $1, * FROM unnest($2::text[], $3::int[], $4::bool[], $5::int[], $6::text[], $7::int[], $8::timestamptz[])`,
		queueID, ids, nums, oks, codes, errs, millis, ats)
	return interpretError("push attempt record", err)
}

// PushAttemptList returns the queue's latest attempts, newest first:
// all, only the failed ones (status "failed") or only the successes
// ("succeeded").
func PushAttemptList(ctx context.Context, db DBTX, queueID int64, status string, limit int) ([]PushAttempt, error) {
	// Each is the first entries of one index range: the filtered list
	// must not walk past the attempts of the other kind.
	var rows pgx.Rows
	var err error
	switch status {
	case "failed", "succeeded":
		rows, err = db.Query(ctx, `/* ferry:push_attempt_list_status */
			SELECT message_id, attempt, ok, status_code, error, duration_ms, at FROM ferry.push_attempts
			WHERE queue_id = $1 AND ok = $2
			ORDER BY at DESC LIMIT $3`, queueID, status == "succeeded", limit)
	default:
		// The latest of each kind, merged.
		rows, err = db.Query(ctx, `/* ferry:push_attempt_list */
			SELECT message_id, attempt, ok, status_code, error, duration_ms, at FROM (
				(SELECT * FROM ferry.push_attempts WHERE queue_id = $1 AND ok = true ORDER BY at DESC LIMIT $2)
				UNION ALL
				(SELECT * FROM ferry.push_attempts WHERE queue_id = $1 AND ok = false ORDER BY at DESC LIMIT $2)
			) a
			ORDER BY at DESC LIMIT $2`, queueID, limit)
	}
	if err != nil {
		return nil, interpretError("push attempt list", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PushAttempt, error) {
		var (
			a  PushAttempt
			ms int
		)
		err := row.Scan(&a.MessageID, &a.Attempt, &a.OK, &a.StatusCode, &a.Error, &ms, &a.At)
		a.Duration = time.Duration(ms) * time.Millisecond
		return a, err
	})
	return out, interpretError("push attempt list", err)
}

// PushAttemptExpire deletes up to limit attempts older than keep.
func PushAttemptExpire(ctx context.Context, db DBTX, keep time.Duration, limit int) (int64, error) {
	// The oldest attempts by the age index, each deleted by its ctid in a
	// statement of its own (see ferry.push_attempt_delete).
	var n int64
	err := db.QueryRow(ctx, `/* ferry:push_attempt_expire */
		SELECT count(ferry.push_attempt_delete(ctid)) FROM (
			SELECT ctid FROM ferry.push_attempts WHERE at < now() - $1 * interval '1 millisecond'
			ORDER BY at LIMIT $2
		) old`, keep.Milliseconds(), limit).Scan(&n)
	if err != nil {
		return 0, interpretError("push attempt expire", err)
	}
	return n, nil
}
