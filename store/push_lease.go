package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Push leases (ferry.push_leases): the one Ferry instance that delivers a
// push target holds the target's lease. Its owner is the instance's id (a
// UUID made at start); it expires at expires_at unless renewed, and any
// instance may take over a lease that has expired. Every time is the
// database's clock; an instance measures its own side of a lease from
// when it sent the statement that set it (see internal/push for the
// self-fencing built on that).

// PushLeaseResult is how an acquire went: the targets now leased to the
// caller, and for each target another instance holds, how long its lease
// has left.
type PushLeaseResult struct {
	Acquired []int64
	Held     map[int64]time.Duration
}

// PushLeaseAcquire leases the given targets to owner for ttl: each one
// that is an enabled push target with no lease, an expired lease or a
// lease of owner's own. One statement. Targets whose lease another
// instance holds are reported in Held (they are not written: nothing is
// locked for them).
func PushLeaseAcquire(ctx context.Context, db DBTX, owner string, ids []int64, ttl time.Duration) (PushLeaseResult, error) {
	res := PushLeaseResult{Held: map[int64]time.Duration{}}
	if len(ids) == 0 {
		return res, nil
	}
	rows, err := db.Query(ctx, `/* ferry:push_lease_acquire */
		WITH want AS (
			SELECT q.id FROM ferry.queues q
			WHERE q.id = ANY($1::bigint[]) AND q.push_url IS NOT NULL AND q.push_disabled_at IS NULL
				AND NOT EXISTS (SELECT 1 FROM ferry.push_leases l
					WHERE l.queue_id = q.id AND l.owner <> $2::uuid AND l.expires_at >= now())
		),
		got AS (
			INSERT INTO ferry.push_leases AS l (queue_id, owner, expires_at)
			SELECT id, $2::uuid, now() + $3 * interval '1 millisecond' FROM want ORDER BY id
			ON CONFLICT (queue_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
			WHERE l.expires_at < now() OR l.owner = excluded.owner
			RETURNING l.queue_id
		)
		SELECT queue_id, NULL::bigint FROM got
		UNION ALL
		SELECT l.queue_id, greatest(0, (extract(epoch FROM l.expires_at - now()) * 1000)::bigint)
		FROM ferry.push_leases l
		WHERE l.queue_id = ANY($1::bigint[]) AND l.owner <> $2::uuid AND l.expires_at >= now()`,
		ids, owner, ttl.Milliseconds())
	if err != nil {
		return res, interpretError("push lease acquire", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id   int64
			left *int64
		)
		if err := rows.Scan(&id, &left); err != nil {
			return res, interpretError("push lease acquire", err)
		}
		if left == nil {
			res.Acquired = append(res.Acquired, id)
		} else {
			res.Held[id] = time.Duration(*left) * time.Millisecond
		}
	}
	return res, interpretError("push lease acquire", rows.Err())
}

// PushLeaseRenew extends owner's leases of the given targets to ttl from
// now, in one statement, and returns the targets whose lease owner still
// holds: any other was taken over (or its target deleted) and is lost.
// It locks the rows in target id order, as [PushLeaseAcquire] does, so a
// renewal and another instance's acquire at the expiry edge cannot
// deadlock whatever plan either gets (the caller tries again at its next
// heartbeat if anything fails).
func PushLeaseRenew(ctx context.Context, db DBTX, owner string, ids []int64, ttl time.Duration) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, `/* ferry:push_lease_renew */
		WITH mine AS (
			SELECT queue_id FROM ferry.push_leases
			WHERE queue_id = ANY($1::bigint[]) AND owner = $2::uuid
			ORDER BY queue_id
			FOR UPDATE
		)
		UPDATE ferry.push_leases l SET expires_at = now() + $3 * interval '1 millisecond'
		FROM mine WHERE l.queue_id = mine.queue_id AND l.owner = $2::uuid
		RETURNING l.queue_id`, ids, owner, ttl.Milliseconds())
	if err != nil {
		return nil, interpretError("push lease renew", err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return held, interpretError("push lease renew", err)
}

// PushLeaseRelease gives up owner's leases of the given targets (those
// another instance took over are left alone), and announces each released
// one on its [PushConfigWakeKey], with the delete's commit: every instance
// looks at the target again at once (a graceful stop hands its targets
// over without waiting for their leases to end).
func PushLeaseRelease(ctx context.Context, db DBTX, owner string, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, `/* ferry:push_lease_release */
		WITH released AS (
			DELETE FROM ferry.push_leases WHERE queue_id = ANY($1::bigint[]) AND owner = $2::uuid
			RETURNING queue_id
		)
		SELECT pg_notify($3, keys) FROM (
			SELECT string_agg(($4::bigint - queue_id)::text, ',') AS keys FROM released
		) k WHERE keys IS NOT NULL`, ids, owner, notifyChannel, PushConfigWakeKey(0))
	return interpretError("push lease release", err)
}

// PushLeaseClaim claims for a push target ([MessageClaim]) only while owner
// holds its lease: each claim statement first share-locks the live lease
// row, so a takeover (which must update that row) waits for the claim to
// commit, and a claim that arrives after the lease expired or was taken
// over claims nothing ([ErrPushLeaseLost]). However slow the network or the
// instance, no claim of an old owner commits after a takeover. One
// statement, as an unfenced claim; exhausted messages are dead-lettered
// after it, outside any transaction, as MessageClaim does.
func PushLeaseClaim(ctx context.Context, db DBTX, owner string, p ClaimParams) ([]Message, int, error) {
	p.leaseOwner = owner
	return MessageClaim(ctx, db, p)
}

// PushSweepResult is what the push sweep found.
type PushSweepResult struct {
	// Targets are every enabled push target.
	Targets []int64
	// Due are the targets with a message claimable now and no live lease
	// of another instance (a lease of the caller's own counts as none).
	Due []int64
	// Held are the targets with a message claimable now whose live lease
	// another instance holds, with the time its lease has left.
	Held map[int64]time.Duration
	// Next is how long until something may become due that is not due
	// now: a message of a target becomes visible (a delay, a retry's
	// backoff, a lease of a message ending), or a lease of another
	// instance over claimable messages ends. Zero: nothing is pending.
	Next time.Duration
}

// PushSweep reads, in one statement, every enabled push target with the
// first entry of its claim index (when its next message is visible) and
// its lease: owner's view of what to deliver now and when to look again.
// It writes nothing. Each target costs one probe of the claim index and
// one of the lease table, whatever the planner believes.
func PushSweep(ctx context.Context, db DBTX, owner string) (PushSweepResult, error) {
	res := PushSweepResult{Held: map[int64]time.Duration{}}
	rows, err := db.Query(ctx, `/* ferry:push_sweep */
		SELECT q.id,
			(extract(epoch FROM h.visible_at - now()) * 1000)::bigint,
			(extract(epoch FROM l.expires_at - now()) * 1000)::bigint,
			l.owner = $1::uuid
		FROM ferry.queues q
		LEFT JOIN LATERAL (
			SELECT m.visible_at FROM ferry.messages m
			WHERE m.queue_id = q.id AND NOT m.waiting
			ORDER BY m.visible_at LIMIT 1
		) h ON true
		LEFT JOIN ferry.push_leases l ON l.queue_id = q.id
		WHERE q.push_url IS NOT NULL AND q.push_disabled_at IS NULL
		ORDER BY q.id`, owner)
	if err != nil {
		return res, interpretError("push sweep", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id            int64
			head, leaseMS *int64
			mine          *bool
		)
		if err := rows.Scan(&id, &head, &leaseMS, &mine); err != nil {
			return res, interpretError("push sweep", err)
		}
		res.Targets = append(res.Targets, id)
		res.sweepRow(id, head, leaseMS, mine)
	}
	return res, interpretError("push sweep", rows.Err())
}

// sweepRow files one target of the sweep: head is how long until its next
// message is visible (nil: none), leaseMS how long its lease has left (nil:
// no lease), mine whether the caller holds it.
func (r *PushSweepResult) sweepRow(id int64, head, leaseMS *int64, mine *bool) {
	next := func(ms int64) {
		d := max(time.Duration(ms)*time.Millisecond, time.Millisecond)
		if r.Next == 0 || d < r.Next {
			r.Next = d
		}
	}
	switch {
	case head == nil:
	case *head > 0:
		next(*head)
	case leaseMS != nil && *leaseMS >= 0 && !*mine:
		r.Held[id] = time.Duration(*leaseMS) * time.Millisecond
		next(*leaseMS)
	default:
		r.Due = append(r.Due, id)
	}
}

// String names the result's parts, for logs and test failures.
func (r PushSweepResult) String() string {
	return fmt.Sprintf("targets %v, due %v, held %v, next %s", r.Targets, r.Due, r.Held, r.Next)
}
