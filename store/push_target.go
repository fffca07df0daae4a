package store

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// PushConfig is where and how the server delivers a queue's messages (or a
// subscription's events): an HTTP POST per message to URL, signed.
type PushConfig struct {
	URL                string
	TimeoutSeconds     int
	MaxInFlight        int
	RateLimitPerSecond int // 0 = no limit
}

// Bounds of a PushConfig, part of the contract (openapi.yaml): the
// handlers refuse settings outside them, and the push worker sizes its
// buffers by MaxPushInFlight.
const (
	MaxPushTimeoutSeconds = 60
	MaxPushInFlight       = 1000
	MaxPushRateLimit      = 10000 // per second
)

// DefaultPushConfig is what a new push configuration gets for every field
// not given (the URL is always required).
func DefaultPushConfig() PushConfig {
	return PushConfig{TimeoutSeconds: 10, MaxInFlight: 10}
}

// PushState is how push delivery is going.
type PushState struct {
	// FailingSince is when the current run of failed attempts began
	// (nil after a success).
	FailingSince *time.Time
	// DisabledAt is set when push was stopped: the endpoint answered 410
	// Gone, or failed for too long. Deliveries wait (and expire by the
	// retention) until push is enabled again.
	DisabledAt     *time.Time
	DisabledReason *string
}

// PushPatch is the push member of a PUT: Remove (push: null) makes the
// queue a pull queue again; otherwise the given fields change, and a queue
// without push gets it (URL then required).
type PushPatch struct {
	Remove             bool
	URL                *string
	TimeoutSeconds     *int
	MaxInFlight        *int
	RateLimitPerSecond *int
	// NewSecret is the signing secret to issue if the queue has none
	// (made by the caller: the store does not know the secret format).
	NewSecret string
	// KeepURL: URL may only repeat the URL the queue pushes to now; any
	// other (a first one too) fails the upsert with ErrPushURLKept. It is
	// checked on the row as the upsert locked it, so a change made
	// meanwhile cannot slip past the caller's own check.
	KeepURL bool
}

// ErrPushURLKept is the error of an upsert whose [PushPatch] has KeepURL
// and would change the push URL.
var ErrPushURLKept = errors.New("the push URL may not be changed by this request")

func (p *PushPatch) apply(cur *PushConfig) (*PushConfig, error) {
	if p == nil {
		return cur, nil
	}
	if p.Remove {
		return nil, nil
	}
	c := DefaultPushConfig()
	if cur != nil {
		c = *cur
	}
	set := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	if p.URL != nil {
		if p.KeepURL && (cur == nil || cur.URL != *p.URL) {
			return nil, ErrPushURLKept
		}
		c.URL = *p.URL
	}
	set(&c.TimeoutSeconds, p.TimeoutSeconds)
	set(&c.MaxInFlight, p.MaxInFlight)
	set(&c.RateLimitPerSecond, p.RateLimitPerSecond)
	if c.URL == "" {
		return nil, &ValidationError{Field: "push.url", Message: "is required"}
	}
	return &c, nil
}

func (c *PushConfig) equal(o *PushConfig) bool {
	if c == nil || o == nil {
		return c == o
	}
	return *c == *o
}

// pushSet writes a PUT's push change to the queue row q (just upserted in
// tx) and reads q back. Changing the URL clears the failure state and
// re-enables push; removing push forgets the secrets. A queue getting push
// without a secret gets patch.NewSecret, shown once via q.IssuedSecret.
func pushSet(ctx context.Context, tx pgx.Tx, q *Queue, push *PushConfig, patch *PushPatch) error {
	if patch == nil {
		return nil
	}
	var (
		url                      *string
		timeout, inflight, limit = 10, 10, 0
	)
	if push != nil {
		url, timeout, inflight, limit = &push.URL, push.TimeoutSeconds, push.MaxInFlight, push.RateLimitPerSecond
	}
	var issued bool
	nq, err := scanQueue(tx.QueryRow(ctx, `
		UPDATE ferry.queues q SET
			push_url = $2, push_timeout_seconds = $3, push_max_in_flight = $4, push_rate_limit = $5,
			signing_secret = CASE WHEN $2::text IS NULL THEN NULL ELSE coalesce(q.signing_secret, $6) END,
			previous_secret = CASE WHEN $2::text IS NULL THEN NULL ELSE q.previous_secret END,
			previous_secret_until = CASE WHEN $2::text IS NULL THEN NULL ELSE q.previous_secret_until END,
			push_failing_since = CASE WHEN $2::text IS DISTINCT FROM q.push_url THEN NULL ELSE q.push_failing_since END,
			push_disabled_at = CASE WHEN $2::text IS DISTINCT FROM q.push_url THEN NULL ELSE q.push_disabled_at END,
			push_disabled_reason = CASE WHEN $2::text IS DISTINCT FROM q.push_url THEN NULL ELSE q.push_disabled_reason END
		WHERE id = $1
		RETURNING `+queueColumns+`, signing_secret IS NOT DISTINCT FROM $6 AND $6 <> ''`,
		q.ID, url, timeout, inflight, limit, patch.NewSecret), &issued)
	if err != nil {
		return err
	}
	*q = nq
	if issued {
		q.IssuedSecret = patch.NewSecret
	}
	return nil
}

// PushConfigWakeKey is the [Notifier] key that announces a change of the
// push configuration of the queue (or subscription) queueID to its push
// worker, wherever it runs, and to every instance's Pusher (which then
// sweeps); the release of a push lease is announced on it too. Queues use
// their id as key and topics minus theirs; these keys lie below both.
func PushConfigWakeKey(queueID int64) int64 { return math.MinInt64/2 - queueID }

// IsPushConfigWakeKey reports whether a [Notifier] key is a
// [PushConfigWakeKey], and not one of the fixed keys at the bottom of the
// range ([KeysWakeKey], [RelayWakeKey], [KeyCreatedWakeKey]): those announce
// other things, and a Pusher that took them for push configuration
// changes would sweep at every SQL API publish.
func IsPushConfigWakeKey(id int64) bool {
	return id <= PushConfigWakeKey(0) && id > math.MinInt64+1<<20
}

// PushTarget is what a push worker needs of a queue or subscription.
type PushTarget struct {
	Queue
	// Subscription: the body of each message is the event to POST.
	Subscription bool
	// Topic is a subscription's topic's name ("" for a queue).
	Topic string
	// Secrets sign each request: the current one first, then the
	// previous one while it is still honoured after a rotation.
	Secrets []string
}

// PushTargetGet reads the push target with the given queue id.
func PushTargetGet(ctx context.Context, db DBTX, queueID int64) (PushTarget, error) {
	var (
		t        PushTarget
		cur, old *string
	)
	q, err := scanQueue(db.QueryRow(ctx, `
		SELECT `+queueColumns+`, topic_id IS NOT NULL, coalesce((SELECT t.name FROM ferry.topics t WHERE t.id = q.topic_id), ''),
			signing_secret, CASE WHEN previous_secret_until > now() THEN previous_secret END
		FROM ferry.queues q WHERE q.id = $1`, queueID), &t.Subscription, &t.Topic, &cur, &old)
	if err != nil {
		return PushTarget{}, interpretError("push target get", err)
	}
	t.Queue = q
	for _, s := range []*string{cur, old} {
		if s != nil {
			t.Secrets = append(t.Secrets, *s)
		}
	}
	return t, nil
}

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

// PushOutcomeParams is how push to one target went in a round of attempts.
type PushOutcomeParams struct {
	QueueID   int64
	Succeeded bool
	// DisableReason, when set, disables push at once with this reason
	// (e.g. the endpoint answered 410 Gone).
	DisableReason string
	// DisableAfter disables push once the target has been failing for
	// longer than this.
	DisableAfter time.Duration
}

// PushOutcome records how push to the queue is going after a round of
// attempts: a success clears the failure state; failures only start it.
// Push is disabled with p.DisableReason, or when the target has been
// failing for longer than p.DisableAfter. It reports whether push is now
// disabled.
func PushOutcome(ctx context.Context, db DBTX, p PushOutcomeParams) (bool, error) {
	var disabled bool
	err := db.QueryRow(ctx, `
		UPDATE ferry.queues q SET
			push_failing_since = CASE WHEN $2 THEN NULL ELSE coalesce(q.push_failing_since, now()) END,
			push_disabled_at = CASE
				WHEN q.push_disabled_at IS NOT NULL THEN q.push_disabled_at
				WHEN $3 <> '' THEN now()
				WHEN NOT $2 AND q.push_failing_since < now() - $4 * interval '1 millisecond' THEN now()
				END,
			push_disabled_reason = CASE
				WHEN q.push_disabled_at IS NOT NULL THEN q.push_disabled_reason
				WHEN $3 <> '' THEN $3
				WHEN NOT $2 AND q.push_failing_since < now() - $4 * interval '1 millisecond'
					THEN 'every attempt failed since ' || to_char(q.push_failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
				END
		WHERE id = $1 AND push_url IS NOT NULL
			-- Most rounds change nothing: skip the write.
			AND (($2 AND q.push_failing_since IS NOT NULL) OR (NOT $2 AND q.push_failing_since IS NULL)
				OR $3 <> '' OR (NOT $2 AND q.push_failing_since < now() - $4 * interval '1 millisecond'))
		RETURNING push_disabled_at IS NOT NULL`, p.QueueID, p.Succeeded, p.DisableReason, p.DisableAfter.Milliseconds()).Scan(&disabled)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return disabled, interpretError("push outcome", err)
}

// PushEnable re-enables push on a queue where it was disabled and clears
// its failure state. [ErrNotFound] if the queue does not exist or has no
// push.
func PushEnable(ctx context.Context, db DBTX, queueID int64) error {
	tag, err := db.Exec(ctx, `
		UPDATE ferry.queues SET push_disabled_at = NULL, push_disabled_reason = NULL, push_failing_since = NULL
		WHERE id = $1 AND push_url IS NOT NULL`, queueID)
	if err == nil && tag.RowsAffected() == 0 {
		err = ErrNotFound
	}
	return interpretError("push enable", err)
}

// SecretRotate makes secret the queue's signing secret; the one it
// replaces keeps signing (as a second signature) for overlap.
// [ErrNotFound] if the queue does not exist or has no push.
func SecretRotate(ctx context.Context, db DBTX, queueID int64, secret string, overlap time.Duration) error {
	tag, err := db.Exec(ctx, `
		UPDATE ferry.queues SET previous_secret = signing_secret, signing_secret = $2,
			previous_secret_until = now() + $3 * interval '1 millisecond'
		WHERE id = $1 AND push_url IS NOT NULL`, queueID, secret, overlap.Milliseconds())
	if err == nil && tag.RowsAffected() == 0 {
		err = ErrNotFound
	}
	return interpretError("secret rotate", err)
}
