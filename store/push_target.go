package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

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
